// Package signin is the dashboard's browser session: a cookie holding a
// random id that stands for a session kept on the server
// (ports.SignInSessions, which survives a restart of agentic-mgmt, so a page
// reconnects without signing in again). Signing out deletes the session at
// once; a new operator token ends every session. Failed sign-ins are
// limited per client address (Limiter).
package signin

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/credential"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// CookieName is the session cookie's name.
const CookieName = "agentic_session"

// TTL is how long a sign-in lasts.
const TTL = 12 * time.Hour

// OperatorTokenID is the TokenID of a session signed in with the operator
// token.
const OperatorTokenID = "operator"

// idBytes is the size of a session id: 256 random bits.
const idBytes = 32

// Sessions mints and looks up the dashboard's sessions in a store. A nil
// *Sessions knows no session.
type Sessions struct {
	store ports.SignInSessions
	// watch tells the connections open on a session (Ended) when it
	// ends; shared with the named tokens' connections (WithWatchers).
	watch *credential.Watchers
	// tokenHash is the SHA-256 of the secret of the token a session
	// stands for now (ok false: no such token).
	tokenHash func(tokenID string) ([32]byte, bool)
}

// NewSessions keeps sessions in store; sessions of OperatorTokenID are bound
// to operatorToken (empty: none can be minted or found).
func NewSessions(store ports.SignInSessions, operatorToken string) *Sessions {
	opHash := sha256.Sum256([]byte(operatorToken))
	return &Sessions{store: store, watch: credential.NewWatchers(), tokenHash: func(id string) ([32]byte, bool) {
		return opHash, id == OperatorTokenID && operatorToken != ""
	}}
}

// WithTokens lets sessions stand for tokens other than the operator's:
// hash returns the SHA-256 of tokenID's secret while the token is valid
// (ok false once it is revoked or expired, which ends its sessions).
func (s *Sessions) WithTokens(hash func(tokenID string) ([32]byte, bool)) *Sessions {
	op := s.tokenHash
	s.tokenHash = func(id string) ([32]byte, bool) {
		if id == OperatorTokenID {
			return op(id)
		}
		return hash(id)
	}
	return s
}

// WithWatchers makes the sessions' connections watched in w, which the
// server shares with connections opened with a named token: revoking the
// token there (w.EndToken) ends its sessions' connections too.
func (s *Sessions) WithWatchers(w *credential.Watchers) *Sessions {
	if w != nil {
		s.watch = w
	}
	return s
}

// ErrNoSuchToken: a session was asked for a token the server does not know.
var ErrNoSuchToken = errors.New("signin: no such token")

// TokenHashes is the hash WithTokens wants, read from a token store: a
// token's hash while it is kept and has not expired by now().
func TokenHashes(store ports.TokenStore, now func() time.Time) func(tokenID string) ([32]byte, bool) {
	return func(id string) ([32]byte, bool) {
		t, err := store.Get(id)
		if err != nil || t.ID != id || t.Expired(now()) {
			return [32]byte{}, false
		}
		return t.Hash, true
	}
}

// Mint starts a session of tokenID at now: the cookie value (the id, which
// the server never keeps) and when it ends.
func (s *Sessions) Mint(tokenID string, now time.Time) (value string, expires time.Time, err error) {
	return s.MintUntil(tokenID, now, time.Time{})
}

// MintUntil is Mint for a token that stops working at notAfter (zero:
// never): the session ends then at the latest.
func (s *Sessions) MintUntil(tokenID string, now, notAfter time.Time) (value string, expires time.Time, err error) {
	th, ok := s.tokenHash(tokenID)
	if !ok {
		return "", time.Time{}, ErrNoSuchToken
	}
	id := make([]byte, idBytes)
	if _, err := rand.Read(id); err != nil {
		return "", time.Time{}, err
	}
	expires = now.Add(TTL)
	if !notAfter.IsZero() && notAfter.Before(expires) {
		expires = notAfter
	}
	err = s.store.Create(ports.SignInSession{
		IDHash: idHash(id), TokenID: tokenID, Binding: binding(id, th),
		Created: now, Expires: expires,
	})
	if err != nil {
		return "", time.Time{}, err
	}
	return base64.RawURLEncoding.EncodeToString(id), expires, nil
}

// Lookup returns the live session whose cookie value is value.
func (s *Sessions) Lookup(value string, now time.Time) (ports.SignInSession, bool) {
	id, ok := parseID(value)
	if s == nil || !ok {
		return ports.SignInSession{}, false
	}
	ss, ok := s.store.Lookup(idHash(id), now)
	if !ok {
		return ports.SignInSession{}, false
	}
	th, ok := s.tokenHash(ss.TokenID)
	if !ok || !hmac.Equal([]byte(ss.Binding), []byte(binding(id, th))) {
		return ports.SignInSession{}, false // its token is gone or has another secret now
	}
	return ss, true
}

// FromRequest returns the live session of r's session cookie.
func (s *Sessions) FromRequest(r *http.Request, now time.Time) (ports.SignInSession, bool) {
	for _, c := range r.CookiesNamed(CookieName) {
		if ss, ok := s.Lookup(c.Value, now); ok {
			return ss, true
		}
	}
	return ports.SignInSession{}, false
}

// End deletes the session whose cookie value is value (none: nothing).
func (s *Sessions) End(value string) error {
	id, ok := parseID(value)
	if s == nil || !ok {
		return nil
	}
	h := idHash(id)
	if err := s.store.Delete(h); err != nil {
		return err
	}
	s.watch.EndKey(h)
	return nil
}

// EndForToken deletes every session of tokenID (it was revoked).
func (s *Sessions) EndForToken(tokenID string) error {
	if s == nil {
		return nil
	}
	if err := s.store.DeleteForToken(tokenID); err != nil {
		return err
	}
	s.watch.EndToken(tokenID)
	return nil
}

// Ended tells a connection opened on session ss (a WebSocket, a stream)
// when to close: the channel is closed once the session is ended here
// (End, EndForToken) or expires (its end less now, by the caller's clock,
// from now on the wall clock). stop releases it when the connection ends
// first.
func (s *Sessions) Ended(ss ports.SignInSession, now time.Time) (ended <-chan struct{}, stop func()) {
	if s == nil {
		return nil, func() {}
	}
	return s.watch.Watch(ss.TokenID, ss.IDHash, ss.Expires, now)
}

func parseID(value string) ([]byte, bool) {
	if len(value) != base64.RawURLEncoding.EncodedLen(idBytes) {
		return nil, false
	}
	id, err := base64.RawURLEncoding.DecodeString(value)
	return id, err == nil && len(id) == idBytes
}

func idHash(id []byte) string {
	h := sha256.Sum256(id)
	return hex.EncodeToString(h[:])
}

// binding ties a session to its token's secret, keyed by the session's id:
// the file of sessions says nothing of the secret.
func binding(id []byte, tokenHash [32]byte) string {
	m := hmac.New(sha256.New, id)
	m.Write([]byte("agentic-sandbox dashboard session\x00"))
	m.Write(tokenHash[:])
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
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
