package rest

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/agentic-sandbox/agentic-sandbox/core/access"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/credential"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// caller is who sent a request that passed the REST auth step: the name of
// its token, the token's role (core/access), its id, label scope and
// expiry. The audit log and the handlers read it with callerOf. The client
// WebSocket knows callers the same way (internal/credential).
type caller = credential.Caller

// dashboardCaller is a dashboard session signed in with the operator token.
var dashboardCaller = credential.Dashboard

// sessionCaller is who a live dashboard session acts as: the token it was
// signed in with (ok false once that token is revoked or expired).
func (s *Server) sessionCaller(ss ports.SignInSession) (caller, bool) {
	return s.verify.Session(ss, s.clock.Now())
}

type callerKey struct{}

func withCaller(ctx context.Context, c caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// callerOf returns who sent the request of ctx; ok is false outside the
// auth step (sign-in, probes, dispatch by aiwg serve's own token).
func callerOf(ctx context.Context) (c caller, ok bool) {
	c, ok = ctx.Value(callerKey{}).(caller)
	return c, ok
}

// noteCaller tells the audit log who r is from (its actor), so that a
// named token's calls, and its refusals, carry its name and role.
func noteCaller(r *http.Request, c caller) {
	if ri := requestInfoOf(r.Context()); ri != nil {
		ri.actor = &Actor{Name: c.Name, Role: c.Role}
	}
}

// bearerCaller authenticates an 'Authorization: Bearer' header: the
// operator token (compared in constant time) is an admin, a named token
// from the store has its role; a revoked or expired one is refused at once.
func (s *Server) bearerCaller(r *http.Request) (caller, bool) {
	tok, ok := bearer(r)
	if !ok {
		return caller{}, false
	}
	return s.verify.Secret(tok, s.clock.Now())
}

// permit checks the caller's role against the operation of the route
// pattern (core/access): 403 forbidden, naming both, when it may not. A
// route outside openapi.yaml is for admins only.
func (s *Server) permit(c caller, pattern string) *apiError {
	if pattern == "" {
		return nil // no such route: 404 or 405 follows
	}
	op := operationOf(pattern)
	if op == "" {
		if c.Role == access.Admin {
			return nil
		}
		op = pattern
	} else if access.Allowed(c.Role, op) {
		return nil
	}
	return newError(http.StatusForbidden, "forbidden",
		"%s", fmt.Sprintf("token %q has role %q, which may not perform %s", c.Name, c.Role, op))
}

// operationOf is the operationId of a route pattern ("GET /api/v1/agents"),
// "" for one openapi.yaml does not have.
func operationOf(pattern string) string { return operationIDs()[pattern] }

// operationIDs maps each route pattern to its operationId as openapi.yaml
// writes it (the generated package's copy of the spec has them renamed to
// Go names).
var operationIDs = sync.OnceValue(func() map[string]string {
	doc, err := openapi3.NewLoader().LoadFromData(restapi.Spec)
	if err != nil {
		panic(fmt.Sprintf("rest: the embedded openapi.yaml does not load: %v", err))
	}
	out := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			out[method+" "+path] = op.OperationID
		}
	}
	return out
})
