// Package rest serves the operator REST API of agentic-mgmt (openapi.yaml)
// on top of the oapi-codegen strict server in gen/restapi.
package rest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"runtime/debug"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/changes"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/credential"
	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace"
	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
	"github.com/agentic-sandbox/agentic-sandbox/internal/telemetry"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Limits and defaults of the API; the README and openapi.yaml describe them.
const (
	// MaxBodyBytes is the largest request body accepted (413 beyond).
	MaxBodyBytes = 1 << 20
	// DefaultExecTimeout applies to exec when timeout_seconds is absent or 0:
	// a caller blocked on a response must not wait forever.
	DefaultExecTimeout = 300 * time.Second
	// DefaultMaxOutputBytes is the output kept per stream unless the request says otherwise.
	DefaultMaxOutputBytes = 16 << 20
	maxMaxOutputBytes     = 64 << 20
	// RetainFinished is how long a finished background command stays queryable.
	RetainFinished = 10 * time.Minute
	// RetainFinishedCount and RetainFinishedBytes bound what finished
	// background commands hold for late readers, so that many commands with
	// large outputs finishing quickly cannot run the server out of memory:
	// at most this many results, holding at most this many bytes of output
	// together; past either, the oldest-ended go first, and a read of one
	// answers 404 command_expired.
	RetainFinishedCount = 1000
	RetainFinishedBytes = 256 << 20
	// maxExpiredIDs bounds the ids remembered as expired (for the clear
	// command_expired answer); older ones answer command_not_found.
	maxExpiredIDs = 100_000
	// maxPollBytes caps the output of one stream in one GET of a command, so a
	// response stays bounded; the client continues from the returned offset.
	maxPollBytes = 4 << 20
	maxWaitMS    = 30000
	maxIDLen     = 128
	killTimeout  = 5 * time.Second
)

// ReadinessCheck is one component reported by /readyz.
type ReadinessCheck struct {
	Name   string
	Ready  bool
	Detail string
}

// Deps is what the REST server needs.
type Deps struct {
	Link   ports.AgentLink
	Agents ports.AgentDirectory
	// Token is the operator bearer token (an admin); empty refuses it.
	Token string
	// Tokens keeps the named tokens with their roles (nil: none, and
	// /api/v1/tokens answers 503 to create).
	Tokens  ports.TokenStore
	Version string
	// Readiness lists the components /readyz reports; nil means always ready.
	Readiness func() []ReadinessCheck
	// Metrics is served at GET /metrics; nil answers 404.
	Metrics http.Handler
	Logger  *slog.Logger
	Clock   ports.Clock
	// Missions is the mission use case behind dispatch, missions, HITL and
	// session kill; nil means there are no missions (dispatch answers 503).
	Missions ports.Missions
	// Executor is the link to aiwg serve; nil means the integration is off.
	// Dispatch is authenticated with its executor token.
	Executor ports.ExecutorLink
	// Sessions is the session use case behind /api/v1/sessions and
	// /api/v1/agents/{agent_id}/sessions; nil means there are none.
	Sessions Sessions
	// SessionLog holds the output of the sessions.
	SessionLog ports.SessionLog
	// Environments is the environment use case behind /api/v1/environments;
	// nil means this server provisions none.
	Environments Environments
	// Pools are the warm pools (nil: none are kept).
	Pools Pools
	// Files moves files to and from agents; MaxFileBytes bounds one file
	// or archive (AGENTIC_FILE_MAX_BYTES; 0 means 16 GiB).
	Files        ports.AgentFiles
	MaxFileBytes int64
	// Tasks is the task use case; nil means this server runs none.
	Tasks Tasks
	// Origins are the server's own origins: the only ones a page signed in
	// with the dashboard's cookie may change state from.
	Origins []string
	// SignIns keeps the dashboard's sign-in sessions (nil: signing in
	// answers 503 and no cookie is accepted).
	SignIns *signin.Sessions
	// Watch closes the event streams of a named token when it is revoked
	// (DELETE /api/v1/tokens tells it) or expires; nil: at expiry only.
	Watch *credential.Watchers
	// Dashboard serves the web dashboard at / and /assets/; nil serves none.
	Dashboard http.Handler
	// Changes tells GET /api/v1/changes what changed (nil: nothing ever).
	Changes *changes.Hub
	// ListeningPorts are the ports each agent reported listening (nil:
	// none are known).
	ListeningPorts ports.ListeningPortsReader
	// Forwards opens connections to ports inside environments, for
	// GET …/ports/{port}/forward (nil: none can be opened; 409).
	Forwards ports.PortDialer
	// PublicPorts keeps the ports marked public (nil: none can be; 503).
	PublicPorts ports.PublicPorts
	// Audit keeps the audit log: every state-changing call, once answered
	// (nil: nothing is recorded, and GET /api/v1/audit answers 503).
	Audit ports.AuditLog
	// PreviewDomain is the domain of the preview hosts the ports lists
	// name, <port>-<environment>.<domain> (AGENTIC_PREVIEW_DOMAIN; empty
	// means "localhost").
	PreviewDomain string
}

// Server implements restapi.StrictServerInterface.
type Server struct {
	d         Deps
	origins   signin.Origins
	limiter   *signin.Limiter
	log       *slog.Logger
	clock     ports.Clock
	tokenHash [32]byte
	verify    *credential.Verifier
	store     *commandStore
}

var _ restapi.StrictServerInterface = (*Server)(nil)

// New returns a server; call Handler for its HTTP handler.
func New(d Deps) *Server {
	if d.Changes == nil {
		d.Changes = changes.NewHub()
	}
	d.PreviewDomain = strings.ToLower(strings.Trim(d.PreviewDomain, "."))
	if d.PreviewDomain == "" {
		d.PreviewDomain = "localhost"
	}
	s := &Server{d: d, log: d.Logger, clock: d.Clock}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = clock.Wall{}
	}
	// Comparing hashes keeps the comparison constant-time even in the
	// token's length.
	s.tokenHash = sha256.Sum256([]byte(d.Token))
	s.verify = credential.NewVerifier(d.Token, d.Tokens)
	s.origins = signin.NewOrigins(d.Origins)
	s.limiter = signin.NewLimiter()
	s.store = newCommandStore(s.clock, RetainFinishedCount, RetainFinishedBytes)
	return s
}

// Handler returns the full HTTP handler of the REST port.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	strict := restapi.NewStrictHandlerWithOptions(s, []restapi.StrictMiddlewareFunc{withRequestOrigin, withExecStream}, restapi.StrictHTTPServerOptions{
		RequestErrorHandlerFunc:  s.requestError,
		ResponseErrorHandlerFunc: s.responseError,
	})
	restapi.HandlerWithOptions(strict, restapi.StdHTTPServerOptions{
		BaseRouter: mux,
		// The last runs first: the parameters are checked against
		// openapi.yaml before any handler, raw or generated, sees them.
		// A scoped token's items are checked after the parameters (scope.go).
		Middlewares:      []restapi.MiddlewareFunc{s.checkBody, s.rawRoutes, s.checkScope, s.checkParams},
		ErrorHandlerFunc: s.paramError,
	})
	mux.HandleFunc("GET /openapi.yaml", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		http.ServeContent(w, r, "openapi.yaml", time.Time{}, bytes.NewReader(restapi.Spec))
	})
	if s.d.Dashboard != nil {
		mux.Handle("GET /{$}", s.d.Dashboard)
		mux.Handle("GET /assets/", s.d.Dashboard)
	}
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		if s.d.Metrics == nil {
			writeError(w, http.StatusNotFound, "not_found", "metrics are not enabled on this server")
			return
		}
		s.d.Metrics.ServeHTTP(w, r)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serve(mux, w, r)
	})
}

func (s *Server) serve(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	hoptrace.Mark("mgmt.rest_in")
	start := time.Now()
	r, ri := withRequestInfo(w, r)
	sw := &statusWriter{ResponseWriter: w}
	s.auditPrepare(mux, sw, r)
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("rest: handler panicked", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if sw.status == 0 {
				writeError(sw, http.StatusInternalServerError, "internal_error", "internal server error")
			}
		}
		s.finish(sw, r, ri, start)
	}()

	_, pattern := mux.Handler(r)
	telemetry.SetRoute(r.Context(), pattern, ri.id)
	if !uploadRoutes[pattern] {
		r.Body = http.MaxBytesReader(sw, r.Body, MaxBodyBytes)
	}
	// ServeMux would answer a path with "//" or dot segments with a
	// redirect to its clean form: a JSON API answers 404 instead.
	if p := r.URL.Path; strings.Contains(p, "//") || strings.Contains(p+"/", "/./") || strings.Contains(p+"/", "/../") {
		writeError(sw, http.StatusNotFound, "not_found", "no such path (paths have no empty or dot segments)")
		return
	}
	if pattern == dispatchRoute {
		// aiwg serve's route: its own gate and token, before the body.
		var apiErr *apiError
		if r, apiErr = s.dispatchGate(r); apiErr != nil {
			if apiErr.status == http.StatusUnauthorized {
				sw.Header().Set("WWW-Authenticate", `Bearer realm="agentic-sandbox"`)
			}
			_ = apiErr.write(sw)
			return
		}
	} else if pattern == signInRoute || pattern == signOutRoute {
		// Their own checks: the token in the body, or nothing to protect.
	} else if p := path.Clean("/" + r.URL.Path); p == "/api" || strings.HasPrefix(p, "/api/") {
		c, ok := s.bearerCaller(r)
		if !ok {
			// The dashboard's cookie acts as the token it was signed in
			// with (sessionCaller).
			var apiErr *apiError
			if c, ok, apiErr = s.cookieCaller(r); apiErr != nil {
				_ = apiErr.write(sw)
				return
			}
			if !ok {
				sw.Header().Set("WWW-Authenticate", `Bearer realm="agentic-sandbox"`)
				writeError(sw, http.StatusUnauthorized, "unauthorized",
					"missing, wrong, expired or revoked bearer token: send 'Authorization: Bearer <token>' (a named token, or the operator token: AGENTIC_OPERATOR_TOKEN or <data dir>/operator-token)")
				return
			}
		}
		noteCaller(r, c)
		if apiErr := s.permit(c, pattern); apiErr != nil {
			_ = apiErr.write(sw)
			return
		}
		r = r.WithContext(withCaller(r.Context(), c))
	}
	if pattern == "" {
		s.unmatched(mux, sw, r)
		return
	}
	if uploadRoutes[pattern] {
		// After authentication: a stranger learns nothing of the limits.
		body, apiErr := s.uploadBody(sw, r)
		if apiErr != nil {
			_ = apiErr.write(sw)
			return
		}
		r.Body = body
	}
	mux.ServeHTTP(sw, r)
}

// bearer returns the token of an 'Authorization: Bearer <token>' header
// (the scheme in any case).
func bearer(r *http.Request) (string, bool) {
	const prefix = "bearer "
	h := r.Header.Get("Authorization")
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	return strings.TrimSpace(h[len(prefix):]), true
}

// unmatched turns the mux's plain-text 404/405 into JSON errors; anything
// else it answers (a redirect to the clean path) passes through.
func (s *Server) unmatched(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	rec := &recorder{header: http.Header{}}
	mux.ServeHTTP(rec, r)
	switch rec.status {
	case http.StatusNotFound:
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no such route: %s %s", r.Method, clip(r.URL.Path)))
	case http.StatusMethodNotAllowed:
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf("method %s is not allowed on %s", r.Method, clip(r.URL.Path)))
	default:
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
	}
}

// clip keeps echoed request data short in error messages.
func clip(s string) string {
	const n = 200
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

type statusWriter struct {
	http.ResponseWriter
	status int
	// body is the start of an error answer, or of any answer when
	// keepBody is set, for the audit log (keep).
	body     []byte
	keepBody bool
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.keep(b)
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the real writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
