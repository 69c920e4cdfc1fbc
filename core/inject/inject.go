// Package inject holds the rules of injected secrets: a secret the
// workload never sees. Its variable holds a placeholder; requests the
// workload sends through its agent's local endpoint reach the server,
// which puts the real value into one header of requests bound for one
// host. Pure: parsing a secret's inject spec, placeholders, the check of a
// request before the value goes in, and (usage.go) what a model API's
// response says it cost.
package inject

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/core/egress"
)

// Spec says where an injected secret's value goes.
type Spec struct {
	// Host is the only host the value is sent to (lower case); the server
	// speaks TLS to it on Port (443 unless the spec names one).
	Host string
	Port int
	// Header is the canonical name of the header that carries the value.
	Header string
	// Format is the header's value with "{}" where the secret goes.
	Format string
	// BaseURLEnv is the workload variable that names the agent's local
	// endpoint for this secret.
	BaseURLEnv string
}

// ErrBadSpec is an inject spec that cannot be used; the error names the field.
var ErrBadSpec = errors.New("bad inject spec")

// DefaultBaseURLEnv is the variable that names the local endpoint for the
// hosts whose clients read a well-known one.
var DefaultBaseURLEnv = map[string]string{
	"api.anthropic.com": "ANTHROPIC_BASE_URL",
	"api.openai.com":    "OPENAI_BASE_URL",
}

// hopHeaders are headers a proxy owns (or that would let the value reach
// somewhere else than the header it is meant for).
var hopHeaders = map[string]bool{
	"Host": true, "Connection": true, "Content-Length": true, "Transfer-Encoding": true,
	"Te": true, "Trailer": true, "Upgrade": true, "Keep-Alive": true,
	"Proxy-Authorization": true, "Proxy-Connection": true, "Cookie": true,
	"Forwarded": true, "X-Forwarded-For": true, "X-Forwarded-Host": true,
}

// ParseSpec checks a secret's inject fields. header may carry the format
// ("Authorization: Bearer {}"); format then must be empty. Without a
// format the header holds the value alone. base_url_env defaults by host
// (DefaultBaseURLEnv) and is required for other hosts.
func ParseSpec(host, header, format, baseURLEnv string) (Spec, error) {
	r, err := egress.ParseRule(host)
	if err != nil || r.Wildcard || r.IP.IsValid() {
		return Spec{}, fmt.Errorf("%w: inject.host %q must be a host name (with an optional :port), not a wildcard or address", ErrBadSpec, host)
	}
	port := r.Port
	if port == 0 {
		port = 443
	}
	if name, f, ok := strings.Cut(header, ":"); ok {
		if format != "" {
			return Spec{}, fmt.Errorf("%w: inject.header carries a format; leave inject.format out", ErrBadSpec)
		}
		header, format = name, strings.TrimSpace(f)
	}
	header = strings.TrimSpace(header)
	if !isToken(header) {
		return Spec{}, fmt.Errorf("%w: inject.header %q is not a header name", ErrBadSpec, header)
	}
	canon := canonicalHeader(header)
	if hopHeaders[canon] {
		return Spec{}, fmt.Errorf("%w: inject.header %s is a header the server owns", ErrBadSpec, canon)
	}
	if format == "" {
		format = "{}"
	}
	if strings.Count(format, "{}") != 1 || strings.ContainsAny(format, "\r\n\x00") || len(format) > 256 {
		return Spec{}, fmt.Errorf("%w: inject.format %q must hold {} once, on one line", ErrBadSpec, format)
	}
	if baseURLEnv == "" {
		baseURLEnv = DefaultBaseURLEnv[r.Host]
	}
	if baseURLEnv == "" {
		return Spec{}, fmt.Errorf("%w: inject.base_url_env is required for %s (the variable that tells the workload's client where to send)", ErrBadSpec, r.Host)
	}
	if !isEnvName(baseURLEnv) {
		return Spec{}, fmt.Errorf("%w: inject.base_url_env %q is not a variable name", ErrBadSpec, baseURLEnv)
	}
	return Spec{Host: r.Host, Port: port, Header: canon, Format: format, BaseURLEnv: baseURLEnv}, nil
}

// Address is host:port of the secret's destination.
func (s Spec) Address() string { return s.Host + ":" + strconv.Itoa(s.Port) }

// Value is the header value carrying secret.
func (s Spec) Value(secret string) string { return strings.Replace(s.Format, "{}", secret, 1) }

// PlaceholderPrefix starts every placeholder, so that one is recognised
// wherever it shows up (a log, a refused request).
const PlaceholderPrefix = "agentic-placeholder-"

// PlaceholderBytes is how much randomness a placeholder holds.
const PlaceholderBytes = 24

// NewPlaceholder makes a placeholder of random (PlaceholderBytes long).
func NewPlaceholder(random []byte) string {
	return PlaceholderPrefix + hex.EncodeToString(random)
}

// IsPlaceholder tells whether s has a placeholder's shape.
func IsPlaceholder(s string) bool {
	h, ok := strings.CutPrefix(s, PlaceholderPrefix)
	if !ok || len(h) != 2*PlaceholderBytes {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil && strings.ToLower(h) == h
}

// Request is what the check sees of a request the workload sends.
type Request struct {
	// Path and RawQuery as the workload sent them (escaped).
	Path, RawQuery string
	// Header holds every header line as sent, names in any case.
	Header map[string][]string
	// Body is the whole body (bounded by the caller).
	Body []byte
}

// Refusal is why a request is not sent; Code is for the error body.
type Refusal struct {
	Code, Reason string
}

func (r *Refusal) Error() string { return r.Reason }

// Refusal codes of Check.
const (
	CodeNoPlaceholder = "no_placeholder"
	CodeMisplaced     = "placeholder_misplaced"
)

// Check decides whether req may go out with spec's value put in: the
// placeholder must be in spec's header and nowhere else (path, query,
// another header, the body), so that the value can only reach the header
// the server writes and the workload cannot have it echoed back.
func Check(spec Spec, placeholder string, req Request) *Refusal {
	if placeholder == "" {
		return &Refusal{Code: CodeNoPlaceholder, Reason: "the secret has no placeholder"}
	}
	if strings.Contains(req.Path, placeholder) || strings.Contains(req.RawQuery, placeholder) ||
		containsUnescaped(req.Path, placeholder) || containsUnescaped(req.RawQuery, placeholder) {
		return &Refusal{Code: CodeMisplaced, Reason: "the placeholder is in the URL; it may only be in the " + spec.Header + " header"}
	}
	found := false
	for name, values := range req.Header {
		canon := canonicalHeader(name)
		for _, v := range values {
			if !strings.Contains(v, placeholder) {
				continue
			}
			if canon != spec.Header {
				return &Refusal{Code: CodeMisplaced, Reason: "the placeholder is in the " + canon + " header; it may only be in the " + spec.Header + " header"}
			}
			found = true
		}
	}
	if strings.Contains(string(req.Body), placeholder) {
		return &Refusal{Code: CodeMisplaced, Reason: "the placeholder is in the request body; it may only be in the " + spec.Header + " header"}
	}
	if !found {
		return &Refusal{Code: CodeNoPlaceholder, Reason: "the " + spec.Header + " header does not hold this environment's placeholder"}
	}
	return nil
}

func containsUnescaped(s, placeholder string) bool {
	u, err := url.PathUnescape(s)
	return err == nil && u != s && strings.Contains(u, placeholder)
}

func isToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func isEnvName(s string) bool {
	if s == "" || len(s) > 128 || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// canonicalHeader is net/textproto's canonical form (X-Api-Key), without
// importing the network packages into core.
func canonicalHeader(s string) string {
	b := []byte(s)
	upper := true
	for i, c := range b {
		if upper && c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		} else if !upper && c >= 'A' && c <= 'Z' {
			b[i] = c - 'A' + 'a'
		}
		upper = c == '-'
	}
	return string(b)
}
