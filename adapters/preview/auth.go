package preview

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// The preview cookie: `<unix expiry>.<base64url HMAC-SHA256>` keyed by the
// operator token over the purpose, the preview host (lower case, with its
// port) and the expiry. It is valid for exactly that host, ends with the
// hour, and with the operator token.

func cookieMAC(token, host, exp string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("agentic-sandbox preview\x00" + host + "\x00" + exp))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// cookieValue is the preview cookie of host for token, ending at exp.
func cookieValue(token, host string, exp time.Time) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	return e + "." + cookieMAC(token, host, e)
}

// maxCookieLen bounds a cookie value this package checks.
const maxCookieLen = 128

// cookieValid reports whether value is a live preview cookie of host.
func cookieValid(token, host, value string, now time.Time) bool {
	if token == "" || len(value) > maxCookieLen {
		return false
	}
	exp, sum, ok := strings.Cut(value, ".")
	if !ok {
		return false
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || now.Unix() >= unix {
		return false
	}
	return hmac.Equal([]byte(sum), []byte(cookieMAC(token, host, exp)))
}

// previewCookieOK reports whether r carries a live preview cookie of host.
// Every cookie of that name counts: a page of another preview host under a
// shared parent domain may have set one more (cookie tossing), which must
// not hide the real one.
func (h *Handler) previewCookieOK(r *http.Request, host string) bool {
	if h.cfg.Token == "" {
		return false
	}
	now := h.clock.Now()
	for _, c := range r.CookiesNamed(CookieName) {
		if cookieValid(h.cfg.Token, host, c.Value, now) {
			return true
		}
	}
	return false
}

// bearer is the token of an `Authorization: Bearer …` value.
func bearer(v string) (string, bool) {
	const p = "bearer "
	if len(v) <= len(p) || !strings.EqualFold(v[:len(p)], p) {
		return "", false
	}
	return strings.TrimSpace(v[len(p):]), true
}

// isOperatorBearer reports whether an Authorization value carries the
// operator token (compared through hashes: constant time, even in length).
func (h *Handler) isOperatorBearer(v string) bool {
	tok, ok := bearer(v)
	if !ok || h.cfg.Token == "" {
		return false
	}
	sum := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(sum[:], h.tokenHash[:]) == 1
}

// bearerOK reports whether r carries the operator token.
func (h *Handler) bearerOK(r *http.Request) bool {
	for _, v := range r.Header.Values("Authorization") {
		if h.isOperatorBearer(v) {
			return true
		}
	}
	return false
}

// sessionOK reports whether r carries the dashboard's session cookie and
// comes from the dashboard's own origin (the path form). A browser marks
// every request with Sec-Fetch-Site: one from another site, or from a page
// of the path form itself (sandboxed: an opaque origin), is not signed in,
// so no page can use the operator's cookie through a preview. A request
// that changes state must also carry this server's Origin, like the API's.
func (h *Handler) sessionOK(r *http.Request) (tokenID string, ok bool) {
	ss, ok := h.cfg.SignIns.FromRequest(r, h.clock.Now())
	if h.cfg.Token == "" || !ok {
		return "", false
	}
	return ss.TokenID, h.sameOrigin(r)
}

// mayReach tells whether a session signed in with tokenID may reach
// agentID's previews (Config.SessionMayReach).
func (h *Handler) mayReach(tokenID, agentID string) bool {
	return h.cfg.SessionMayReach == nil || h.cfg.SessionMayReach(tokenID, agentID)
}

// sameOrigin is the browser side of sessionOK: the request comes from the
// dashboard's own origin.
func (h *Handler) sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "none", "same-origin":
	default:
		return false
	}
	origin := r.Header.Get("Origin")
	own, _ := signin.NormalOrigin(scheme(r) + "://" + r.Host)
	if origin != "" {
		got, ok := signin.NormalOrigin(origin)
		return ok && got == own
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return false
}

// stripCredentials removes from an outbound request's header what this
// package took as credentials: an Authorization carrying the operator
// token (an app's own Authorization stays) and the preview and session
// cookies (the app's own cookies stay).
func (h *Handler) stripCredentials(hd http.Header) {
	if vs := hd.Values("Authorization"); len(vs) > 0 {
		kept := make([]string, 0, len(vs))
		for _, v := range vs {
			if !h.isOperatorBearer(v) {
				kept = append(kept, v)
			}
		}
		setOrDelete(hd, "Authorization", kept)
	}
	if vs := hd.Values("Cookie"); len(vs) > 0 {
		kept := make([]string, 0, len(vs))
		for _, line := range vs {
			var pairs []string
			for _, p := range strings.Split(line, ";") {
				p = strings.TrimSpace(p)
				name, _, _ := strings.Cut(p, "=")
				if p == "" || name == CookieName || name == signin.CookieName {
					continue
				}
				pairs = append(pairs, p)
			}
			if len(pairs) > 0 {
				kept = append(kept, strings.Join(pairs, "; "))
			}
		}
		setOrDelete(hd, "Cookie", kept)
	}
}

func setOrDelete(hd http.Header, key string, vs []string) {
	if len(vs) == 0 {
		hd.Del(key)
		return
	}
	hd[http.CanonicalHeaderKey(key)] = vs
}

// One-time codes: minted on the main host for a signed-in dashboard session,
// bound to one preview host, exchanged there once for the preview cookie.
const (
	codeTTL  = time.Minute
	maxCodes = 4096
)

type codeEntry struct {
	host    string
	expires time.Time
}

type codeStore struct {
	mu    sync.Mutex
	max   int
	codes map[string]codeEntry
}

func newCodeStore(limit int) *codeStore {
	return &codeStore{max: limit, codes: map[string]codeEntry{}}
}

// mint makes a code for host, valid until now+codeTTL. A full store drops
// its expired codes, then the one closest to expiring.
func (s *codeStore) mint(host string, now time.Time) string {
	code := rand.Text() + rand.Text() // 2×130 random bits
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.codes) >= s.max {
		var oldest string
		for c, e := range s.codes {
			if !now.Before(e.expires) {
				delete(s.codes, c)
				continue
			}
			if oldest == "" || e.expires.Before(s.codes[oldest].expires) {
				oldest = c
			}
		}
		if len(s.codes) >= s.max {
			delete(s.codes, oldest)
		}
	}
	s.codes[code] = codeEntry{host: host, expires: now.Add(codeTTL)}
	return code
}

// take consumes code: true when it was live and minted for host. A code is
// gone after its first use, whatever the outcome.
func (s *codeStore) take(code, host string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.codes[code]
	if !ok {
		return false
	}
	delete(s.codes, code)
	return now.Before(e.expires) && subtle.ConstantTimeCompare([]byte(e.host), []byte(host)) == 1
}

// maxNextLen bounds the path a sign-in returns to.
const maxNextLen = 4096

// validNext is a path on the same host to return to: "/…", never "//…"
// or a backslash (both name another host in a browser), no control
// characters, no scheme or host.
func validNext(next string) bool {
	if len(next) > maxNextLen || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsRune(next, '\\') {
		return false
	}
	for i := 0; i < len(next); i++ {
		if next[i] < 0x20 || next[i] == 0x7f {
			return false
		}
	}
	u, err := url.Parse(next)
	return err == nil && u.Scheme == "" && u.Host == "" && u.User == nil
}

// serveSignin is GET /preview-signin?host=&next= on the main host: a
// signed-in dashboard session gets a one-time code and a redirect to the
// preview host's /.agentic-preview/auth; a browser not signed in goes to
// the dashboard, whose sign-in returns here.
func (h *Handler) serveSignin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		h.writeProblem(w, r, problem{status: http.StatusMethodNotAllowed, code: "method_not_allowed", title: "Method not allowed", msg: "/preview-signin answers GET only"})
		return
	}
	q := r.URL.Query()
	host, next := strings.ToLower(q.Get("host")), q.Get("next")
	t, ok := parsePreviewHost(host, h.domain)
	if !ok || t.hostPort != hostPortOf(r.Host) || !validNext(next) {
		h.log.Info("preview: sign-in refused: not a preview host of this server or a bad next", "remote", r.RemoteAddr)
		h.writeProblem(w, r, problem{status: http.StatusBadRequest, code: "invalid_request", title: "Not a preview of this server",
			msg: "host must be a preview host <port>-<environment>." + h.domain + " on this server's port, and next a path starting with /."})
		return
	}
	noStore(w)
	ss, ok := h.cfg.SignIns.FromRequest(r, h.clock.Now())
	if h.cfg.Token == "" || !ok {
		back := signinPath + "?" + url.Values{"host": {t.host}, "next": {next}}.Encode()
		redirect(w, "/?next="+url.QueryEscape(back))
		return
	}
	// A session whose token's label scope leaves the environment out gets
	// no preview cookie for it: as if it did not exist.
	if agentID, err := h.resolve(t.name, true); err == nil && !h.mayReach(ss.TokenID, agentID) {
		h.writeResolveError(w, r, t.name, ports.ErrEnvNotFound, true)
		return
	}
	code := h.codes.mint(t.host, h.clock.Now())
	redirect(w, scheme(r)+"://"+t.host+authPath+"?"+url.Values{"code": {code}, "next": {next}}.Encode())
}

// serveAuth is /.agentic-preview/auth?code=&next= on a preview host: a live
// code minted for this host becomes the host's preview cookie.
func (h *Handler) serveAuth(w http.ResponseWriter, r *http.Request, t previewHost) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		h.writeProblem(w, r, problem{status: http.StatusMethodNotAllowed, code: "method_not_allowed", title: "Method not allowed", msg: authPath + " answers GET only"})
		return
	}
	noStore(w)
	q := r.URL.Query()
	next := q.Get("next")
	if !validNext(next) {
		next = "/"
	}
	code := q.Get("code")
	now := h.clock.Now()
	if h.cfg.Token == "" || code == "" || len(code) > 128 || !h.codes.take(code, t.host, now) {
		h.log.Info("preview: sign-in code refused (unknown, used, expired or for another host)", "host", t.host, "remote", r.RemoteAddr)
		h.writeProblem(w, r, problem{status: http.StatusForbidden, code: "forbidden", title: "This sign-in link is used up",
			msg:  "The one-time sign-in code is unknown, already used, expired (60 s) or meant for another preview.",
			hint: "Open the preview again; it signs you in through the dashboard."})
		return
	}
	exp := now.Add(CookieTTL)
	// Host-only (no Domain): sent to this preview host alone. Secure only
	// over TLS: on plain http (loopback) a Secure cookie would never come back.
	http.SetCookie(w, &http.Cookie{ //nolint:gosec // Secure follows TLS, see above
		Name: CookieName, Value: cookieValue(h.cfg.Token, t.host, exp), Path: "/",
		MaxAge: int(CookieTTL / time.Second), HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil,
	})
	redirect(w, next)
}

// noStore keeps a response out of caches and its URL out of Referer.
func noStore(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
}

// redirect answers 302 to loc as given (http.Redirect would clean the
// path, which is the app's business).
func redirect(w http.ResponseWriter, loc string) {
	w.Header().Set("Location", loc)
	w.WriteHeader(http.StatusFound)
}
