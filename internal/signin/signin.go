// Package signin is the dashboard's browser session: a cookie that stands
// for the operator token. The cookie is an expiry and a MAC keyed by the
// token, so it survives a restart of agentic-mgmt (a page reconnects
// without signing in again) and a new operator token ends every session.
package signin

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// CookieName is the session cookie's name.
const CookieName = "agentic_session"

// TTL is how long a sign-in lasts.
const TTL = 12 * time.Hour

// Value is the cookie value for a session of token ending at expires.
func Value(token string, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return exp + "." + mac(token, exp)
}

func mac(token, exp string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("agentic-sandbox dashboard session\x00" + exp))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Valid reports whether value is a live session of token at now.
func Valid(token, value string, now time.Time) bool {
	exp, sum, ok := strings.Cut(value, ".")
	if !ok || token == "" || len(value) > 128 {
		return false
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || now.Unix() >= unix {
		return false
	}
	return hmac.Equal([]byte(sum), []byte(mac(token, exp)))
}

// FromRequest reports whether r carries a live session cookie of token.
func FromRequest(r *http.Request, token string, now time.Time) bool {
	c, err := r.Cookie(CookieName)
	return err == nil && Valid(token, c.Value, now)
}

// Cookie is the session cookie to set (expires set) or to clear (zero).
func Cookie(value string, expires time.Time, secure bool) *http.Cookie {
	// Secure only over TLS: on plain http (loopback) a Secure cookie would never be sent.
	c := &http.Cookie{Name: CookieName, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure} //nolint:gosec // Secure follows TLS, see above
	if value == "" {
		c.MaxAge = -1
	} else {
		c.Expires = expires
	}
	return c
}

// Origins are a server's own origins (scheme://host:port) that a browser
// page may act from.
type Origins map[string]bool

// NewOrigins normalises list; entries that are not origins are left out.
func NewOrigins(list []string) Origins {
	o := Origins{}
	for _, s := range list {
		if n, ok := NormalOrigin(s); ok {
			o[n] = true
		}
	}
	return o
}

// Allow reports whether origin is one of o.
func (o Origins) Allow(origin string) bool {
	n, ok := NormalOrigin(origin)
	return ok && o[n]
}

// NormalOrigin is o as scheme://host:port, lower case, with the scheme's
// default port made explicit. The request's Host is never compared: a page
// on a rebound DNS name sends a Host of its own choosing.
func NormalOrigin(o string) (string, bool) {
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil || (u.Path != "" && u.Path != "/") {
		return "", false
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return strings.ToLower(u.Scheme + "://" + net.JoinHostPort(host, port)), true
}
