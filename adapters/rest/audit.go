package rest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// The audit log: every state-changing call is recorded once answered,
// through Deps.Audit. An entry has no field for a token, a secret or a
// request body.

// Actor is who made a request, as the audit log names it. The step that
// authenticates a request says who it was (requestInfoOf(ctx).actor);
// without it the audit finds out from the credentials as today (the
// operator token, the dashboard cookie, aiwg serve's executor token).
type Actor struct {
	Name string
	Role string
}

// The actors of today's credentials (the operator token is the first
// admin, and so is a dashboard signed in with it).
var (
	actorOperator  = Actor{Name: "operator", Role: "admin"}
	actorDashboard = Actor{Name: "dashboard", Role: "admin"}
	actorExecutor  = Actor{Name: "executor", Role: "executor"}
	actorAnonymous = Actor{Name: "anonymous"}
)

// requestInfo is what serve keeps of a request for its log line and its
// audit entry; it rides in the request's context.
type requestInfo struct {
	id     string
	client string
	actor  *Actor
	// pattern is the route's pattern of a state-changing call ("": no
	// route), looked up once by auditPrepare for finish.
	pattern string
}

type requestInfoKey struct{}

// requestInfoOf returns the request's info (nil outside serve). The
// authentication step says who the caller is by setting its actor (a
// named token's name and role); without it the audit finds out with
// actorOf.
func requestInfoOf(ctx context.Context) *requestInfo {
	ri, _ := ctx.Value(requestInfoKey{}).(*requestInfo)
	return ri
}

// RequestID returns the id of the request ctx belongs to ("" outside one).
func RequestID(ctx context.Context) string {
	if ri := requestInfoOf(ctx); ri != nil {
		return ri.id
	}
	return ""
}

// withRequestInfo gives r a new request id, sent as X-Request-Id.
func withRequestInfo(w http.ResponseWriter, r *http.Request) (*http.Request, *requestInfo) {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	ri := &requestInfo{id: hex.EncodeToString(b[:]), client: clientHost(r.RemoteAddr)}
	w.Header().Set("X-Request-Id", ri.id)
	return r.WithContext(context.WithValue(r.Context(), requestInfoKey{}, ri)), ri
}

// Requester is who a request under way is from, as its audit entry will
// name them: what a use case's decorator (the agent credentials' audit in
// agentic-mgmt) records for what the request causes.
type Requester struct {
	Actor     Actor
	Client    string
	RequestID string
}

// RequesterOf returns who sent the request of ctx; ok is false outside a
// request that passed the authentication step (which names the caller).
func RequesterOf(ctx context.Context) (Requester, bool) {
	ri := requestInfoOf(ctx)
	if ri == nil || ri.actor == nil {
		return Requester{}, false
	}
	return Requester{Actor: *ri.actor, Client: ri.client, RequestID: ri.id}, true
}

// finish logs r's call once answered and records it in the audit log. A
// state-changing call is one info line (method, route, status, duration,
// actor, request id: the request id finds its audit entry in the log, and
// the audit entry's request id finds the line), a read is a debug line.
// The request's context goes with the record, for a handler that adds
// what it carries (a trace id).
func (s *Server) finish(sw *statusWriter, r *http.Request, ri *requestInfo, start time.Time) {
	status := sw.status
	if status == 0 {
		status = http.StatusOK
	}
	if !audited(r) {
		if s.log.Enabled(r.Context(), slog.LevelDebug) {
			s.log.LogAttrs(r.Context(), slog.LevelDebug, "rest: request", slog.String("method", r.Method), slog.String("path", r.URL.Path),
				slog.Int("status", status), slog.Duration("duration", time.Since(start)), slog.String("request_id", ri.id))
		}
		return
	}
	pattern := ri.pattern // auditPrepare's
	a := s.actorOf(r, pattern, status)
	if ri.actor != nil { // the authentication step said
		a = *ri.actor
	}
	route := pattern
	if route == "" {
		route = "(no route)"
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "rest: request", slog.String("method", r.Method), slog.String("route", route),
		slog.Int("status", status), slog.Duration("duration", time.Since(start)), slog.String("actor", a.Name), slog.String("role", a.Role),
		slog.String("request_id", ri.id))
	s.audit(pattern, status, a, sw, r, ri)
}

// maxKeptBody is how much of an answer the status writer keeps for the
// audit: an error's code, a created resource's id or name.
const maxKeptBody = 4 << 10

// keep notes the start of an answer's body when the audit wants it.
func (w *statusWriter) keep(b []byte) {
	if !w.keepBody && w.status < 400 {
		return
	}
	if room := maxKeptBody - len(w.body); room > 0 {
		w.body = append(w.body, b[:min(len(b), room)]...)
	}
}

// audited tells whether r's call goes into the audit log: what changes
// state, and the upgrades (a forward's raw connection).
func audited(r *http.Request) bool {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return r.Header.Get("Upgrade") != ""
}

// auditPrepare, before the call, asks the status writer to keep a created
// resource's answer when the path names no target.
func (s *Server) auditPrepare(mux *http.ServeMux, sw *statusWriter, r *http.Request) {
	if !audited(r) {
		return
	}
	_, pattern := mux.Handler(r)
	if ri := requestInfoOf(r.Context()); ri != nil {
		ri.pattern = pattern
	}
	if s.d.Audit == nil {
		return
	}
	if sr := specRoutes()[pattern]; sr != nil && len(sr.pathParams) == 0 && r.Method == http.MethodPost {
		sw.keepBody = true
	}
}

// audit records r's call, answered with status, once it is answered.
func (s *Server) audit(pattern string, status int, a Actor, sw *statusWriter, r *http.Request, ri *requestInfo) {
	if s.d.Audit == nil || pattern == "" {
		return // no log, or no such route: nothing it could change
	}
	e := ports.AuditEntry{
		At:        s.clock.Now().UTC(),
		Client:    ri.client,
		Operation: pattern,
		Status:    status,
		RequestID: ri.id,
		Actor:     a.Name,
		Role:      a.Role,
	}
	var body struct {
		Code      string `json:"code"`
		ID        string `json:"id"`
		Name      string `json:"name"`
		SessionID string `json:"session_id"`
		TaskID    string `json:"task_id"`
		MissionID string `json:"mission_id"`
	}
	if len(sw.body) > 0 {
		_ = json.Unmarshal(sw.body, &body) // a cut or non-JSON answer: no code, no target
	}
	if e.Status >= 400 {
		e.Code = body.Code
	}
	if sr := specRoutes()[pattern]; sr != nil {
		// openapi.yaml's spelling (the embedded spec's ids are exported).
		id := sr.route.Operation.OperationID
		e.Operation = strings.ToLower(id[:1]) + id[1:]
		e.Target = pathTarget(pattern, r.URL.Path)
	}
	if e.Target == "" && e.Status < 300 {
		for _, v := range []string{body.SessionID, body.TaskID, body.MissionID, body.ID, body.Name} {
			if v != "" {
				e.Target = v
				break
			}
		}
	}
	if err := s.d.Audit.Append(e); err != nil {
		s.log.ErrorContext(r.Context(), "rest: audit entry not kept", "request_id", ri.id, "operation", e.Operation, "err", err)
	}
}

// actorOf finds who r is from by the credentials of today, when the
// authentication step did not say (setActor): the operator token, aiwg
// serve's executor token on its dispatch route, the dashboard's cookie.
func (s *Server) actorOf(r *http.Request, pattern string, status int) Actor {
	switch {
	case pattern == signInRoute:
		if status < 300 {
			return actorDashboard
		}
		return actorAnonymous
	case status == http.StatusUnauthorized:
		return actorAnonymous
	case pattern == dispatchRoute:
		return actorExecutor
	}
	if tok, ok := bearer(r); ok {
		got := sha256.Sum256([]byte(tok))
		if s.d.Token != "" && subtle.ConstantTimeCompare(got[:], s.tokenHash[:]) == 1 {
			return actorOperator
		}
		return actorAnonymous
	}
	return actorDashboard // past authentication without a bearer token: the cookie
}

// pathTarget is the values of the pattern's path parameters in path,
// joined by "/" (the mux has not matched a request refused before it).
func pathTarget(pattern, path string) string {
	_, pat, _ := strings.Cut(pattern, " ")
	ps, vs := strings.Split(strings.Trim(pat, "/"), "/"), strings.Split(strings.Trim(path, "/"), "/")
	var vals []string
	for i, p := range ps {
		if !strings.HasPrefix(p, "{") || i >= len(vs) {
			continue
		}
		v := vs[i]
		if strings.HasSuffix(p, "...}") {
			v = strings.Join(vs[i:], "/")
		}
		if u, err := url.PathUnescape(v); err == nil {
			v = u
		}
		vals = append(vals, v)
	}
	return strings.Join(vals, "/")
}

// clientHost is the caller's address without its port.
func clientHost(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}

// ListAudit serves GET /api/v1/audit.
func (s *Server) ListAudit(_ context.Context, req restapi.ListAuditRequestObject) (restapi.ListAuditResponseObject, error) {
	if s.d.Audit == nil {
		return nil, newError(http.StatusServiceUnavailable, "store_unavailable", "this server keeps no audit log")
	}
	q := ports.AuditQuery{}
	p := req.Params
	if p.Since != nil {
		q.Since = *p.Since
	}
	if p.Actor != nil {
		q.Actor = *p.Actor
	}
	if p.Target != nil {
		q.Target = *p.Target
	}
	if p.Limit != nil {
		q.Limit = *p.Limit
	}
	if p.Cursor != nil {
		q.Cursor = *p.Cursor
	}
	entries, next, err := s.d.Audit.Query(q)
	switch {
	case errors.Is(err, ports.ErrBadCursor):
		return nil, newError(http.StatusBadRequest, "invalid_cursor", "cursor: not a next_cursor of this log")
	case err != nil:
		s.log.Error("rest: audit log query failed", "err", err)
		return nil, newError(http.StatusServiceUnavailable, "store_unavailable", "the audit log cannot be read now; try again")
	}
	out := restapi.ListAudit200JSONResponse{Entries: make([]restapi.AuditEntry, len(entries))}
	for i, e := range entries {
		out.Entries[i] = restapi.AuditEntry{
			At: e.At, Actor: e.Actor, Role: e.Role, Client: e.Client, Operation: e.Operation,
			Target: e.Target, Status: e.Status, Code: e.Code, RequestId: e.RequestID,
		}
	}
	if next != "" {
		out.NextCursor = &next
	}
	return out, nil
}
