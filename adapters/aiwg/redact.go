package aiwg

import (
	"net/url"
	"regexp"
)

const redacted = "REDACTED"

// redactURL makes a URL fit for a log line or a status: userinfo and every
// query value are replaced, since any of them may carry a credential
// (ours carry ?token=). What does not parse is scrubbed as text.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return redactText(raw)
	}
	if u.User != nil {
		u.User = url.User(redacted)
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return redactText(raw)
		}
		for k, vs := range q {
			for i := range vs {
				vs[i] = redacted
			}
			q[k] = vs
		}
		u.RawQuery = q.Encode()
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// secretText matches credentials written into free text: token=…,
// bearer …, and the userinfo of a URL.
var secretText = regexp.MustCompile(`(?i)((?:^|[^a-z0-9_])(?:access_)?token=)[^&\s"']*|(bearer\s+)[^\s"']+|(://)[^/@\s"']+@`)

// redactText scrubs credentials out of free text, e.g. an error message
// that quotes a URL.
func redactText(s string) string {
	return secretText.ReplaceAllStringFunc(s, func(m string) string {
		sub := secretText.FindStringSubmatch(m)
		switch {
		case sub[1] != "":
			return sub[1] + redacted
		case sub[2] != "":
			return sub[2] + redacted
		default:
			return sub[3] + redacted + "@"
		}
	})
}
