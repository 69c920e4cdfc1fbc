package rest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/access"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
)

// The dashboard's sign-in: the operator token or a named token in, an
// HttpOnly session cookie out. Served before the strict handler, which cannot set cookies.
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
	// Failed sign-ins are limited per client address: past the bound the
	// token is not even compared.
	client, now := signin.ClientKey(r), s.clock.Now()
	if ok, after := s.limiter.Allow(client, now); !ok {
		s.log.WarnContext(r.Context(), "rest: dashboard sign-in refused: too many failed sign-ins", "remote", r.RemoteAddr)
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(after.Seconds()))))
		_ = newError(http.StatusTooManyRequests, "too_many_sign_ins",
			"too many failed sign-ins from this address: try again in %d s", int(math.Ceil(after.Seconds()))).write(w)
		return
	}
	c, tokenID, ok := s.signInCaller(req.Token, now)
	if !ok {
		s.limiter.Failed(client, now)
		s.log.WarnContext(r.Context(), "rest: dashboard sign-in refused", "remote", r.RemoteAddr)
		_ = newError(http.StatusUnauthorized, "unauthorized", "wrong token: sign in with the operator token or a named token").write(w)
		return
	}
	s.limiter.Succeeded(client)
	noteCaller(r, c)
	if c.Role == access.Executor {
		s.log.WarnContext(r.Context(), "rest: dashboard sign-in refused: an executor token", "token", c.Name, "remote", r.RemoteAddr)
		_ = newError(http.StatusForbidden, "forbidden",
			"%s", fmt.Sprintf("token %q has role %q, which may not sign in to the dashboard (an executor token is for an orchestrator)", c.Name, c.Role)).write(w)
		return
	}
	if s.d.SignIns == nil {
		_ = newError(http.StatusServiceUnavailable, "store_unavailable", "this server keeps no sign-in sessions").write(w)
		return
	}
	value, exp, err := s.d.SignIns.MintUntil(tokenID, now, c.Expires)
	if err != nil {
		s.log.ErrorContext(r.Context(), "rest: dashboard sign-in: the session could not be kept", "err", err)
		_ = newError(http.StatusServiceUnavailable, "store_unavailable", "the sign-in session could not be kept; try again").write(w)
		return
	}
	http.SetCookie(w, signin.Cookie(value, exp, r.TLS != nil))
	w.WriteHeader(http.StatusNoContent)
}

// signInCaller is who a sign-in's token is: the operator token (the
// session stands for signin.OperatorTokenID, acting as the "dashboard"
// admin), or a named token kept and not expired (the session stands for
// its id).
func (s *Server) signInCaller(tok string, now time.Time) (c caller, tokenID string, ok bool) {
	c, ok = s.verify.Secret(tok, now)
	switch {
	case !ok:
		return caller{}, "", false
	case c.TokenID == "": // the operator token
		return dashboardCaller, signin.OperatorTokenID, true
	}
	return c, c.TokenID, true
}

// signOut ends the session on the server at once (its cookie no longer
// reads anything, wherever a copy of it is) and clears the cookie.
func (s *Server) signOut(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, signin.Cookie("", s.clock.Now(), r.TLS != nil))
	for _, c := range r.CookiesNamed(signin.CookieName) {
		if err := s.d.SignIns.End(c.Value); err != nil {
			s.log.ErrorContext(r.Context(), "rest: sign-out: the session could not be ended", "err", err)
			_ = newError(http.StatusServiceUnavailable, "store_unavailable", "the session could not be ended; try again").write(w)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// cookieCaller accepts a dashboard session cookie, as the caller of the
// token it was signed in with; a request that changes state must also come
// from one of the server's own origins (the cookie is SameSite=Strict too:
// two locks on cross-site requests).
func (s *Server) cookieCaller(r *http.Request) (c caller, ok bool, apiErr *apiError) {
	ss, ok := s.d.SignIns.FromRequest(r, s.clock.Now())
	if !ok {
		return caller{}, false, nil
	}
	if c, ok = s.sessionCaller(ss); !ok {
		return caller{}, false, nil
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return c, true, nil
	}
	if !s.origins.Allow(r.Header.Get("Origin")) {
		return caller{}, false, newError(http.StatusUnauthorized, "unauthorized", "a request with the session cookie that changes state must come from this server's own pages (Origin)")
	}
	return c, true, nil
}

// streamRoutes are the routes that may stay open long (event streams).
var streamRoutes = map[string]bool{sessionOutputRoute: true, taskEventsRoute: true, changesRoute: true}

// untilSignedOut gives a stream a context that ends with its credential:
// a named token revoked (Deps.Watch, told by DELETE /api/v1/tokens) or
// expired, or, for one opened with the dashboard's cookie alone, its
// session signed out or expired. release frees it once the stream is done.
// The credential is checked again once watched: a revocation in between is
// not missed.
func (s *Server) untilSignedOut(r *http.Request) (*http.Request, func()) {
	now := s.clock.Now()
	var ended <-chan struct{}
	var stop func()
	var still func() bool
	if _, ok := bearer(r); ok {
		c, ok := callerOf(r.Context())
		if !ok || c.TokenID == "" {
			return r, func() {} // the operator token lasts as long as the server
		}
		ended, stop = s.d.Watch.Watch(c.TokenID, "", c.Expires, now)
		still = func() bool { _, ok := s.bearerCaller(r); return ok }
	} else {
		ss, ok := s.d.SignIns.FromRequest(r, now)
		if !ok {
			return r, func() {}
		}
		ended, stop = s.d.SignIns.Ended(ss, now)
		still = func() bool { _, ok, _ := s.cookieCaller(r); return ok }
	}
	ctx, cancel := context.WithCancel(r.Context())
	if !still() {
		cancel()
	}
	go func() {
		select {
		case <-ended:
			cancel()
		case <-ctx.Done():
		}
	}()
	return r.WithContext(ctx), func() { stop(); cancel() }
}
