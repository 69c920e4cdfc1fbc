package wsterm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/agentic-sandbox/agentic-sandbox/core/access"
	"github.com/agentic-sandbox/agentic-sandbox/core/session"
	"github.com/agentic-sandbox/agentic-sandbox/internal/credential"
	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace"
	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// SessionService is what the WebSocket needs of the session use case.
type SessionService interface {
	Create(ctx context.Context, spec session.Spec, cols, rows uint16) (session.Session, error)
	StartShell(ctx context.Context, agentID, name string, cols, rows uint16) (session.Session, error)
	Get(id string) (session.Session, bool)
	List(agentID string) []session.Session
	Exited(id string) <-chan struct{}
	Join(id, viewerID string, want session.Role) (session.Role, error)
	TakeControl(id, viewerID string) (session.Role, string, error)
	Leave(id, viewerID string)
	Input(ctx context.Context, id, viewerID string, data []byte) error
	Resize(ctx context.Context, id, viewerID string, cols, rows uint16) error
	TermSize(id string) (session.Size, bool)
	Viewers(id string) []session.Viewer
	Signal(ctx context.Context, id, viewerID string, sig int) error
	Kill(ctx context.Context, id string) error
}

// Config is what the server needs.
type Config struct {
	Sessions SessionService
	Agents   ports.AgentDirectory
	Log      ports.SessionLog
	IDs      ports.IDGenerator
	Token    string
	Version  string
	Logger   *slog.Logger
	// Origins are the server's own origins (scheme://host:port, as a
	// browser sends them): pages from these may open /ws. A request
	// without Origin is not a browser's and is let in on its token.
	Origins []string
	// SignIns are the dashboard's sign-in sessions: a page signed in opens
	// /ws with its session cookie (nil: no cookie is accepted).
	SignIns *signin.Sessions
	// Tokens are the named tokens (nil: only the operator token and the
	// sign-in sessions open /ws). A viewer joins sessions as an observer
	// only; an executor may not open /ws; a label scope limits what a
	// token sees to the agents of environments carrying it.
	Tokens ports.TokenStore
	// Watch closes the sockets of a named token revoked (EndToken); nil:
	// they close only when the token expires.
	Watch *credential.Watchers
	// EnvironmentLabels finds an environment's labels, which a scoped
	// token's agents are matched against (access.AgentInScope; nil: a
	// scoped token sees no agent).
	EnvironmentLabels access.EnvironmentLabels
	// Audit records the control frames: creating a session or a shell,
	// taking control, signals and kills (nil: not recorded).
	Audit ports.AuditLog
	// StallTimeout is how long one frame may wait for a viewer that does
	// not read before the viewer is disconnected (default 2m); it rejoins
	// from its offset and loses nothing the log still holds.
	StallTimeout time.Duration
}

// Server serves /ws.
type Server struct {
	cfg    Config
	up     websocket.Upgrader
	verify *credential.Verifier

	mu    sync.Mutex
	conns map[string]*conn // by viewer id, to tell a viewer its role changed
}

// tell queues a frame for the viewer's connection, if it is still open;
// never blocks (a viewer too slow to take it learns on its next refusal).
func (s *Server) tell(viewer string, v any) {
	s.mu.Lock()
	c := s.conns[viewer]
	s.mu.Unlock()
	if c == nil {
		return
	}
	c.pending.Add(1)
	select {
	case c.out <- v:
	default:
		c.pending.Add(-1)
	}
}

const (
	readChunk = 64 << 10
	// maxDiscardBytes is the largest frame read (and discarded) to answer
	// it with an error; a larger one closes the connection.
	maxDiscardBytes = 16 << 20
	pingTimeout     = 30 * time.Second
	pingEvery       = 20 * time.Second
	outQueue        = 64
)

// New returns the server.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = 2 * time.Minute
	}
	s := &Server{cfg: cfg, conns: map[string]*conn{}, verify: credential.NewVerifier(cfg.Token, cfg.Tokens)}
	allowed := signin.NewOrigins(cfg.Origins)
	s.up = websocket.Upgrader{ReadBufferSize: 16 << 10, WriteBufferSize: 64 << 10, CheckOrigin: func(r *http.Request) bool {
		o := r.Header.Get("Origin")
		if o == "" {
			return true
		}
		return allowed.Allow(o)
	}}
	return s
}

// Handler serves the WebSocket at /ws.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", s.serveWS)
	return mux
}

// authorized returns who r is from, if anyone: the operator token or a
// named token (Bearer, or ?token= as browsers cannot set headers on a
// WebSocket), else a dashboard page's session cookie (the origin is
// checked on upgrade), whose session is returned too (nil for a token).
func (s *Server) authorized(r *http.Request, now time.Time) (credential.Caller, *ports.SignInSession, bool) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		tok = r.URL.Query().Get("token")
	}
	if c, ok := s.verify.Secret(strings.TrimSpace(tok), now); ok {
		return c, nil, true
	}
	if ss, ok := s.cfg.SignIns.FromRequest(r, now); ok {
		if c, ok := s.verify.Session(ss, now); ok {
			return c, &ss, true
		}
	}
	return credential.Caller{}, nil, false
}

// mayOpen tells whether role may open /ws at all: a viewer (to observe),
// an operator and an admin; not an executor (aiwg serve's orchestration).
func mayOpen(role string) bool {
	return role == access.Viewer || role == access.Operator || role == access.Admin
}

func writeJSONError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}{msg, code})
}

func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	who, session, ok := s.authorized(r, now)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentic-sandbox"`)
		writeJSONError(w, http.StatusUnauthorized, "unauthorized", "missing, wrong, expired or revoked token (the operator token or a named token: Authorization: Bearer, or ?token=), or no live dashboard sign-in")
		return
	}
	if !mayOpen(who.Role) {
		writeJSONError(w, http.StatusForbidden, "forbidden", fmt.Sprintf("token %q has role %q, which may not open the terminal WebSocket /ws", who.Name, who.Role))
		return
	}
	// Signed out, the token revoked, or either expired: the socket goes at
	// once. Watched before the upgrade, then authorized again: a
	// revocation in between is not missed.
	var ended <-chan struct{}
	stop := func() {}
	reason := "token revoked or expired"
	switch {
	case session != nil:
		ss := *session
		ss.Expires = who.Until(ss.Expires) // the sooner of the session's end and its token's
		ended, stop = s.cfg.SignIns.Ended(ss, now)
		reason = "signed out, or the token signed in with was revoked or expired"
	case who.TokenID != "":
		ended, stop = s.cfg.Watch.Watch(who.TokenID, "", who.Expires, now)
	}
	defer stop()
	if _, _, ok := s.authorized(r, time.Now()); !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentic-sandbox"`)
		writeJSONError(w, http.StatusUnauthorized, "unauthorized", "the token was revoked or expired, or the sign-in ended")
		return
	}
	ws, err := s.up.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	// Frames over MaxFrameBytes are answered with an error frame, not a
	// dropped connection: readLoop reads up to this much of any frame and
	// discards the rest. Beyond it (a flood) the connection goes.
	ws.SetReadLimit(maxDiscardBytes)
	if ended != nil {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-ended:
				s.cfg.Logger.Info("terminal connection closed: its credential ended", "actor", who.Name, "reason", reason)
				_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.ClosePolicyViolation, reason), time.Now().Add(time.Second))
				_ = ws.Close()
			case <-done:
			}
		}()
	}
	c := &conn{srv: s, ws: ws, who: who, client: clientHost(r.RemoteAddr), viewer: s.cfg.IDs.NewID(), out: make(chan any, outQueue), joins: map[string]context.CancelFunc{}}
	s.mu.Lock()
	s.conns[c.viewer] = c
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c.viewer)
		s.mu.Unlock()
	}()
	c.run()
}

// clientHost is the client's address without its port.
func clientHost(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}

// conn is one client connection: a viewer of any number of sessions.
type conn struct {
	srv    *Server
	ws     *websocket.Conn
	who    credential.Caller
	client string
	viewer string
	out    chan any
	// pending counts the frames queued on out and not yet written: a
	// session's stream writes its frames itself (write) only when none
	// is, so a frame never overtakes one sent before it.
	pending atomic.Int64
	// wmu serialises the writes to ws (the writer loop's and write's).
	wmu sync.Mutex
	// cancel ends the connection (a write that failed or stalled).
	cancel context.CancelFunc

	mu    sync.Mutex
	joins map[string]context.CancelFunc
}

// run serves the connection until it ends. Its context is its own: a
// hijacked connection outlives the request that opened it.
func (c *conn) run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.cancel = cancel
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); c.writeLoop(ctx) }()
	c.readLoop(ctx)
	cancel()
	c.mu.Lock()
	for id, stop := range c.joins {
		stop()
		c.srv.cfg.Sessions.Leave(id, c.viewer)
	}
	c.mu.Unlock()
	wg.Wait()
	_ = c.ws.Close()
}

// send queues a frame; it blocks while the client is slow (that paces only
// this client's streams), and gives up when the connection ends.
func (c *conn) send(ctx context.Context, v any) bool {
	c.pending.Add(1)
	select {
	case c.out <- v:
		return true
	case <-ctx.Done():
		c.pending.Add(-1)
		return false
	}
}

// write writes a frame of a session's stream on the calling goroutine
// (the keystroke echo's path: no hand-off to the writer loop), unless
// frames queued before it are not written yet: then it queues it behind
// them, as send. It blocks while the client is slow, as send does, and
// reports false once the connection is over.
func (c *conn) write(ctx context.Context, v any) bool {
	c.wmu.Lock()
	if c.pending.Load() > 0 {
		c.wmu.Unlock()
		return c.send(ctx, v)
	}
	if ctx.Err() != nil {
		c.wmu.Unlock()
		return false
	}
	err := c.writeFrame(v)
	c.wmu.Unlock()
	if err != nil {
		c.drop(err)
		return false
	}
	return true
}

// writeFrame writes v; wmu must be held.
func (c *conn) writeFrame(v any) error {
	if _, ok := v.(OutputFrame); ok {
		hoptrace.Mark("mgmt.ws_write")
	}
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.srv.cfg.StallTimeout))
	return c.ws.WriteJSON(v)
}

func (c *conn) writeLoop(ctx context.Context) {
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case v := <-c.out:
			c.wmu.Lock()
			err := c.writeFrame(v)
			c.pending.Add(-1) // written (or never to be): a stream may write again
			c.wmu.Unlock()
			if err != nil {
				c.drop(err)
				return
			}
		case <-ping.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(pingTimeout)); err != nil {
				c.drop(err)
				return
			}
		}
	}
}

// drop ends a connection whose writes fail or stall: closing the socket
// tells the viewer (a read error, not silence) and ends the read loop, which
// would otherwise wait on a viewer that sends nothing.
func (c *conn) drop(err error) {
	c.srv.cfg.Logger.Info("terminal viewer disconnected: writes stalled or failed", "viewer", c.viewer, "err", err)
	c.cancel()
	_ = c.ws.Close()
}

func (c *conn) readLoop(ctx context.Context) {
	for {
		typ, r, err := c.ws.NextReader()
		if err != nil {
			return
		}
		raw, err := io.ReadAll(io.LimitReader(r, MaxFrameBytes+1))
		if err != nil {
			return
		}
		hoptrace.Mark("mgmt.ws_read")
		if len(raw) > MaxFrameBytes {
			if _, err := io.Copy(io.Discard, r); err != nil {
				return
			}
			c.send(ctx, ErrorFrame{Type: FrameError, Code: "frame_too_large", Message: fmt.Sprintf("frames are at most %d bytes", MaxFrameBytes)})
			continue
		}
		if typ != websocket.TextMessage {
			c.send(ctx, ErrorFrame{Type: FrameError, Code: "invalid_frame", Message: "frames are JSON text messages"})
			continue
		}
		if !utf8.Valid(raw) {
			c.send(ctx, ErrorFrame{Type: FrameError, Code: "invalid_frame", Message: "text frames must be valid UTF-8"})
			continue
		}
		f, err := DecodeClientFrame(raw)
		if err != nil {
			c.send(ctx, NewErrorFrame(f.ID, err))
			continue
		}
		if err := c.handle(ctx, f); err != nil {
			c.send(ctx, NewErrorFrame(f.ID, mapError(err)))
		}
	}
}

// InputPatience bounds how long one input frame waits for room in its
// session's input queue (the process is not reading). Meanwhile the socket
// is not read, so a fast client is paced (back-pressure); past it the frame
// is refused with a stdin_busy error frame, and nothing of it was written.
// A variable for tests.
var InputPatience = 10 * time.Second

// input writes an input frame, waiting (without reading the socket) while
// the session's input queue is full: nothing is dropped, and what cannot be
// queued in InputPatience is refused.
func (c *conn) input(ctx context.Context, f ClientFrame) error {
	deadline := time.Now().Add(InputPatience)
	wait := 2 * time.Millisecond
	for {
		err := c.srv.cfg.Sessions.Input(ctx, f.SessionID, c.viewer, f.Bytes)
		if !errors.Is(err, ports.ErrStdinBusy) || !time.Now().Add(wait).Before(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

func mapError(err error) error {
	var pe *ProtocolError
	switch {
	case errors.As(err, &pe):
		return err
	case errors.Is(err, session.ErrNotController):
		return bad("not_controller", "only the session's controller may do that (join as controller, or ask for a hand-over)")
	case errors.Is(err, session.ErrNotFound):
		return bad("session_not_found", "no such session")
	case errors.Is(err, ports.ErrAgentNotFound):
		return bad("agent_not_found", "no such agent")
	case errors.Is(err, ports.ErrAgentNotConnected):
		return bad("agent_not_connected", "the agent is not connected")
	case errors.Is(err, ports.ErrCommandEnded):
		return bad("session_ended", "the session has ended")
	case errors.Is(err, ports.ErrStdinBusy):
		return bad("stdin_busy", "the session is not reading its input: this input was not written (none of it); send it again later")
	case errors.Is(err, ports.ErrStdinClosed):
		return bad("stdin_closed", "the session's input is closed: this input was not written")
	case errors.Is(err, ports.ErrWakeFailed):
		// Work aimed at a hibernated environment that could not be woken:
		// the environment is failed with the reason (GET it for more).
		return bad("wake_failed", "%v", err)
	case errors.Is(err, session.ErrQuota):
		return bad("too_many_sessions", "%v", err)
	case errors.Is(err, session.ErrInvalidName), errors.Is(err, session.ErrInvalidSpec), errors.Is(err, session.ErrNameTaken):
		return bad("invalid_request", "%v", err)
	default:
		return err
	}
}

type helloFrame struct {
	Type     string   `json:"type"`
	ID       string   `json:"id,omitempty"`
	Version  string   `json:"version"`
	Features []string `json:"features"`
	ViewerID string   `json:"viewer_id"`
	// Role is the connection's token's role: a viewer only observes.
	Role string `json:"role,omitempty"`
}

type startedFrame struct {
	Type      string `json:"type"`
	ID        string `json:"id,omitempty"`
	SessionID string `json:"session_id"`
	AgentID   string `json:"agent_id"`
	Name      string `json:"name"`
	SessType  string `json:"session_type"`
}

type roleFrame struct {
	Type      string `json:"type"`
	ID        string `json:"id,omitempty"`
	SessionID string `json:"session_id"`
	Role      string `json:"role"`
	// Cols and Rows are the session's terminal size when known: an
	// observer shows the terminal at the size its programs draw for.
	Cols uint16 `json:"cols,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
}

// resizedFrame tells a session's other viewers its terminal's new size.
type resizedFrame struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	Cols      uint16 `json:"cols"`
	Rows      uint16 `json:"rows"`
}

type exitedFrame struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	State     string `json:"state"`
	ExitCode  *int   `json:"exit_code"`
}

type gapFrame struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
	From      uint64 `json:"from"`
	To        uint64 `json:"to"`
}

type listFrame struct {
	Type     string `json:"type"`
	ID       string `json:"id,omitempty"`
	Agents   any    `json:"agents,omitempty"`
	Sessions any    `json:"sessions,omitempty"`
}

type sessionView struct {
	SessionID string `json:"session_id"`
	AgentID   string `json:"agent_id"`
	Name      string `json:"name"`
	Type      string `json:"session_type"`
	State     string `json:"state"`
	ExitCode  *int   `json:"exit_code,omitempty"`
}

func (c *conn) handle(ctx context.Context, f ClientFrame) error {
	sv := c.srv.cfg.Sessions
	switch f.Type {
	case FrameHello:
		c.send(ctx, helloFrame{Type: FrameHello, ID: f.ID, Version: c.srv.cfg.Version, ViewerID: c.viewer,
			Features: []string{"sessions", "replay", "roles", "base64"}, Role: c.who.Role})
	case FramePing:
		c.send(ctx, struct {
			Type string `json:"type"`
			ID   string `json:"id,omitempty"`
		}{FramePong, f.ID})
	case FrameListAgents:
		type agentView struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		}
		var out []agentView
		for _, a := range c.srv.cfg.Agents.Agents() {
			if c.agentInScope(a.ID) {
				out = append(out, agentView{a.ID, string(a.Status)})
			}
		}
		c.send(ctx, listFrame{Type: FrameAgents, ID: f.ID, Agents: out})
	case FrameListSessions:
		out := []sessionView{}
		for _, s := range sv.List(f.AgentID) {
			if c.agentInScope(s.AgentID) {
				out = append(out, sessionView{s.ID, s.AgentID, s.Name, string(s.Type), string(s.State), s.ExitCode})
			}
		}
		c.send(ctx, listFrame{Type: FrameSessions, ID: f.ID, Sessions: out})
	case FrameCreateSession, FrameStartShell:
		op := "ws.createSession"
		if f.Type == FrameStartShell {
			op = "ws.startShell"
		}
		var s session.Session
		// The entry is kept before the creator hears of the session.
		if err := c.control(op, f.AgentID, func() (string, error) {
			if !c.agentInScope(f.AgentID) {
				return f.AgentID, ports.ErrAgentNotFound // out of scope: as if there were none
			}
			var err error
			if f.Type == FrameStartShell {
				s, err = sv.StartShell(ctx, f.AgentID, f.Name, uint16(f.Cols), uint16(f.Rows)) //nolint:gosec // validate bounds cols and rows to 1..maxDim
			} else {
				s, err = sv.Create(ctx, session.Spec{AgentID: f.AgentID, Name: f.Name, Type: ports.SessionType(f.SessionTy),
					Command: f.Command, Args: f.Args, Cwd: f.Cwd, Env: f.Env, PTY: f.PTY == nil || *f.PTY}, uint16(f.Cols), uint16(f.Rows)) //nolint:gosec // validate bounds cols and rows to 1..maxDim
			}
			if err != nil {
				return f.AgentID, err
			}
			return s.ID, nil
		}); err != nil {
			return err
		}
		c.send(ctx, startedFrame{Type: FrameSessionStarted, ID: f.ID, SessionID: s.ID, AgentID: s.AgentID, Name: s.Name, SessType: string(s.Type)})
		// The creator watches from the start and controls an interactive session.
		from := uint64(0)
		role := session.Observer
		if s.Type == ports.SessionInteractive {
			role = session.Controller
		}
		return c.join(ctx, f.ID, s.ID, role, &from, false)
	case FrameJoinSession:
		role := session.Role(f.Role)
		if role == "" {
			role = session.Observer
		}
		if role != session.Controller {
			if err := c.sessionInScope(f.SessionID); err != nil {
				return err
			}
			return c.join(ctx, f.ID, f.SessionID, role, f.ReplayFrom, f.Take)
		}
		// Asking for control (taking it from another viewer with take).
		return c.control("ws.takeControl", f.SessionID, func() (string, error) {
			if err := c.sessionInScope(f.SessionID); err != nil {
				return f.SessionID, err
			}
			return f.SessionID, c.join(ctx, f.ID, f.SessionID, role, f.ReplayFrom, f.Take)
		})
	case FrameLeaveSession:
		c.leave(f.SessionID)
	case FrameInput:
		if err := c.mayControl("send input"); err != nil {
			return err
		}
		if err := c.sessionInScope(f.SessionID); err != nil {
			return err
		}
		return c.input(ctx, f)
	case FrameResize:
		if err := c.mayControl("resize the terminal"); err != nil {
			return err
		}
		if err := c.sessionInScope(f.SessionID); err != nil {
			return err
		}
		cols, rows := uint16(f.Cols), uint16(f.Rows) //nolint:gosec // validate bounds cols and rows to 1..maxDim
		if err := sv.Resize(ctx, f.SessionID, c.viewer, cols, rows); err != nil {
			return err
		}
		for _, v := range sv.Viewers(f.SessionID) {
			if v.ID != c.viewer {
				c.srv.tell(v.ID, resizedFrame{Type: FrameResized, SessionID: f.SessionID, Cols: cols, Rows: rows})
			}
		}
		return nil
	case FrameSignal:
		sig, ok := ParseSignal(f.Signal)
		if !ok {
			return bad("invalid_frame", "unknown signal %q", f.Signal)
		}
		return c.control("ws.signal", f.SessionID, func() (string, error) {
			if err := c.sessionInScope(f.SessionID); err != nil {
				return f.SessionID, err
			}
			return f.SessionID, sv.Signal(ctx, f.SessionID, c.viewer, sig)
		})
	case FrameKillSession:
		return c.control("ws.killSession", f.SessionID, func() (string, error) {
			if err := c.sessionInScope(f.SessionID); err != nil {
				return f.SessionID, err
			}
			return f.SessionID, sv.Kill(ctx, f.SessionID)
		})
	}
	return nil
}

func (c *conn) join(ctx context.Context, reqID, id string, want session.Role, replayFrom *uint64, take bool) error {
	var granted session.Role
	var err error
	if take && want == session.Controller {
		var prev string
		granted, prev, err = c.srv.cfg.Sessions.TakeControl(id, c.viewer)
		if err == nil && prev != "" {
			c.srv.tell(prev, roleFrame{Type: FrameRoleChanged, SessionID: id, Role: string(session.Observer)})
		}
	} else {
		granted, err = c.srv.cfg.Sessions.Join(id, c.viewer, want)
	}
	if err != nil {
		return err
	}
	joined := roleFrame{Type: FrameRoleChanged, ID: reqID, SessionID: id, Role: string(granted)}
	if z, ok := c.srv.cfg.Sessions.TermSize(id); ok {
		joined.Cols, joined.Rows = z.Cols, z.Rows
	}
	c.send(ctx, joined)
	c.mu.Lock()
	if stop, ok := c.joins[id]; ok {
		stop() // a re-join restarts the stream from the new offset
	}
	sctx, stop := context.WithCancel(ctx)
	c.joins[id] = stop
	c.mu.Unlock()
	from := c.srv.cfg.Log.End(id)
	if replayFrom != nil {
		from = *replayFrom
	}
	go c.stream(sctx, id, from)
	return nil
}

func (c *conn) leave(id string) {
	c.mu.Lock()
	if stop, ok := c.joins[id]; ok {
		stop()
		delete(c.joins, id)
	}
	c.mu.Unlock()
	c.srv.cfg.Sessions.Leave(id, c.viewer)
}

// stream sends the session's log from off on, then live output, exactly
// once and in order, then session_exited. It writes the frames itself
// (write): live output goes from the log to the socket without another
// goroutine. A client that reads slowly makes the write block, so it falls
// behind in the log instead of holding up anyone else; if the log dropped
// what it had not read yet, it gets a gap frame.
func (c *conn) stream(ctx context.Context, id string, off uint64) {
	log := c.srv.cfg.Log
	exited := c.srv.cfg.Sessions.Exited(id)
	// The waits for output end when the session does (one watcher for
	// the whole stream, not one per wait).
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-wctx.Done():
		}
	}()
	for {
		data, start, gap, err := log.ReadFrom(id, off, readChunk)
		if errors.Is(err, ports.ErrOffsetBeyondEnd) {
			end := log.End(id)
			c.write(ctx, gapFrame{Type: FrameGap, SessionID: id, From: off, To: end})
			off = end
			continue
		}
		if err != nil {
			c.write(ctx, NewErrorFrame("", err))
			return
		}
		if gap {
			if !c.write(ctx, gapFrame{Type: FrameGap, SessionID: id, From: off, To: start}) {
				return
			}
		}
		if len(data) > 0 {
			hoptrace.Mark("mgmt.ws_log_read")
			if !c.write(ctx, NewOutputFrame(id, start, data)) {
				return
			}
			off = start + uint64(len(data))
			continue
		}
		off = start
		select {
		case <-exited:
			if log.End(id) > off {
				continue // output that came with the end
			}
			s, _ := c.srv.cfg.Sessions.Get(id)
			c.write(ctx, exitedFrame{Type: FrameSessionExited, SessionID: id, State: string(s.State), ExitCode: s.ExitCode})
			return
		default:
		}
		err = log.Wait(wctx, id, off)
		if ctx.Err() != nil {
			return
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			c.write(ctx, NewErrorFrame("", err))
			return
		}
	}
}

// ParseSignal takes a signal name (INT, SIGINT, …) or number.
func ParseSignal(s string) (int, bool) {
	if n, err := strconv.Atoi(s); err == nil {
		return n, n >= 1 && n <= 64
	}
	names := map[string]int{"HUP": 1, "INT": 2, "QUIT": 3, "KILL": 9, "USR1": 10, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15, "CONT": 18, "STOP": 19, "TSTP": 20, "WINCH": 28}
	n, ok := names[strings.TrimPrefix(strings.ToUpper(s), "SIG")]
	return n, ok
}
