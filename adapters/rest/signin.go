package rest

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
)

// The dashboard's sign-in: the operator token in, an HttpOnly session
// cookie out. Served before the strict handler, which cannot set cookies.
const (
	signInRoute  = http.MethodPost + " /api/v1/signin"
	signOutRoute = http.MethodPost + " /api/v1/signout"
)

// SignIn is served by signIn.
func (s *Server) SignIn(context.Context, restapi.SignInRequestObject) (restapi.SignInResponseObject, error) {
	return nil, errors.New("POST /api/v1/signin is served by signIn")
}

// SignOut is served by signOut.
func (s *Server) SignOut(context.Context, restapi.SignOutRequestObject) (restapi.SignOutResponseObject, error) {
	return nil, errors.New("POST /api/v1/signout is served by signOut")
}

func (s *Server) signIn(w http.ResponseWriter, r *http.Request) {
	// A page elsewhere must not sign a browser in (login CSRF).
	if o := r.Header.Get("Origin"); o != "" && !s.origins.Allow(o) {
		_ = newError(http.StatusUnauthorized, "unauthorized", "sign-in is taken only from this server's own pages").write(w)
		return
	}
	var req restapi.SignInRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Token == "" || dec.More() {
		_ = badRequest("want {\"token\": \"<operator token>\"}").write(w)
		return
	}
	got := sha256.Sum256([]byte(req.Token))
	if s.d.Token == "" || subtle.ConstantTimeCompare(got[:], s.tokenHash[:]) != 1 {
		s.log.Warn("rest: dashboard sign-in refused", "remote", r.RemoteAddr)
		_ = newError(http.StatusUnauthorized, "unauthorized", "wrong operator token").write(w)
		return
	}
	exp := s.clock.Now().Add(signin.TTL)
	http.SetCookie(w, signin.Cookie(signin.Value(s.d.Token, exp), exp, r.TLS != nil))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) signOut(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, signin.Cookie("", s.clock.Now(), r.TLS != nil))
	w.WriteHeader(http.StatusNoContent)
}

// cookieAuthorized accepts a dashboard session cookie; a request that
// changes state must also come from one of the server's own origins (the
// cookie is SameSite=Strict too: two locks on cross-site requests).
func (s *Server) cookieAuthorized(r *http.Request) (ok bool, apiErr *apiError) {
	if s.d.Token == "" || !signin.FromRequest(r, s.d.Token, s.clock.Now()) {
		return false, nil
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true, nil
	}
	if !s.origins.Allow(r.Header.Get("Origin")) {
		return false, newError(http.StatusUnauthorized, "unauthorized", "a request with the session cookie that changes state must come from this server's own pages (Origin)")
	}
	return true, nil
}
