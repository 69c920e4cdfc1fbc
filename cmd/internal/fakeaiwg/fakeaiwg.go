// Package fakeaiwg is a fake `aiwg serve` for tests: the sandbox and
// executor registrations and both WebSocket streams, over real HTTP on
// 127.0.0.1, recording everything it is sent.
package fakeaiwg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Frame is one text frame received on an executor stream.
type Frame struct {
	// Conn numbers the executor stream connections from 1.
	Conn       int
	Raw        []byte
	Event      string
	ExecutorID string
	MissionID  string
	TS         string
	Data       map[string]any
	// HasMissionID reports whether the frame had a mission_id key at all.
	HasMissionID bool
}

// Server is a running fake.
type Server struct {
	ln   net.Listener
	http *http.Server
	wg   sync.WaitGroup
	up   websocket.Upgrader

	mu            sync.Mutex
	closed        bool
	execRegStatus int
	sbxRegStatus  int
	execWSStatus  int
	sandboxRegs   []map[string]any
	executorRegs  []map[string]any
	sandboxTokens map[string]string // sandbox_id → last token
	execTokens    map[string]string // executor_id → last token
	lastExecToken string
	tokens        []string // every token issued
	frames        []Frame
	frameAdded    chan struct{} // closed and replaced on each new frame
	execConns     int
	current       *wsConn // the newest open executor stream
	sandboxOpen   int
	sandboxConns  []*wsConn
	open          map[*wsConn]struct{}
}

// wsConn serialises writes, which the library allows one at a time.
type wsConn struct {
	*websocket.Conn
	wmu sync.Mutex
}

func (c *wsConn) writeJSON(v any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return c.WriteJSON(v)
}

// Start serves on 127.0.0.1 on a free port.
func Start() (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{
		ln:            ln,
		up:            websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }},
		sandboxTokens: map[string]string{},
		execTokens:    map[string]string{},
		frameAdded:    make(chan struct{}),
		open:          map[*wsConn]struct{}{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/sandboxes/register", s.registerSandbox)
	mux.HandleFunc("POST /api/v1/executors/register", s.registerExecutor)
	mux.HandleFunc("GET /ws/sandbox/{id}", s.sandboxStream)
	mux.HandleFunc("GET /ws/executors/{id}", s.executorStream)
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.wg.Go(func() { _ = s.http.Serve(ln) })
	return s, nil
}

// URL is the base URL to use as AIWG_SERVE_ENDPOINT.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Close stops serving and ends every open stream.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	conns := make([]*wsConn, 0, len(s.open))
	for c := range s.open {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	_ = s.http.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	s.wg.Wait()
}

// SetExecutorRegisterStatus makes executor registration answer code (e.g.
// 404) with no token; 0 restores normal answers.
func (s *Server) SetExecutorRegisterStatus(code int) {
	s.mu.Lock()
	s.execRegStatus = code
	s.mu.Unlock()
}

// SetSandboxRegisterStatus makes sandbox registration answer code (e.g.
// 503) with no token; 0 restores normal answers.
func (s *Server) SetSandboxRegisterStatus(code int) {
	s.mu.Lock()
	s.sbxRegStatus = code
	s.mu.Unlock()
}

// SetExecutorStreamStatus makes the executor stream handshake answer code
// (e.g. 401) instead of upgrading; 0 restores normal answers.
func (s *Server) SetExecutorStreamStatus(code int) {
	s.mu.Lock()
	s.execWSStatus = code
	s.mu.Unlock()
}

// SandboxRegistrations are the bodies of every sandbox registration
// request, those refused by SetSandboxRegisterStatus included.
func (s *Server) SandboxRegistrations() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.sandboxRegs...)
}

// ExecutorRegistrations are the bodies of every executor registration
// request, those refused by SetExecutorRegisterStatus included.
func (s *Server) ExecutorRegistrations() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.executorRegs...)
}

// ExecutorToken is the last executor token issued.
func (s *Server) ExecutorToken() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastExecToken
}

// Frames are every frame received on executor streams, in order.
func (s *Server) Frames() []Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Frame(nil), s.frames...)
}

// WaitFrame returns the first frame, received already or later, that
// match accepts, or ctx's error.
func (s *Server) WaitFrame(ctx context.Context, match func(Frame) bool) (Frame, error) {
	i := 0
	for {
		s.mu.Lock()
		for ; i < len(s.frames); i++ {
			if match(s.frames[i]) {
				f := s.frames[i]
				s.mu.Unlock()
				return f, nil
			}
		}
		added := s.frameAdded
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return Frame{}, ctx.Err()
		case <-added:
		}
	}
}

// ExecutorConnections counts executor stream connections accepted so far.
func (s *Server) ExecutorConnections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.execConns
}

// DropExecutorStream closes the current executor stream from the server
// side, with a close frame; frames the client sent before it saw the close
// are still read and recorded.
func (s *Server) DropExecutorStream() {
	s.mu.Lock()
	c := s.current
	s.current = nil
	s.mu.Unlock()
	if c == nil {
		return
	}
	c.wmu.Lock()
	_ = c.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseGoingAway, "dropped by test"), time.Now().Add(time.Second))
	c.wmu.Unlock()
	// A client that never answers the close is cut off.
	time.AfterFunc(2*time.Second, func() { _ = c.Close() })
}

// KillExecutorStream cuts the current executor stream's TCP connection
// without a close frame, as a crash or a network failure would; frames in
// flight are lost.
func (s *Server) KillExecutorStream() {
	s.mu.Lock()
	c := s.current
	s.current = nil
	s.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

// DropSandboxStream closes every open sandbox stream from the server side.
func (s *Server) DropSandboxStream() {
	s.mu.Lock()
	conns := s.sandboxConns
	s.sandboxConns = nil
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// Tokens are every token issued so far, sandbox and executor, for tests
// that check that none leaks.
func (s *Server) Tokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.tokens...)
}

// SendRawToExecutor writes b as a text frame, as is, to the current
// executor stream (for malformed frames).
func (s *Server) SendRawToExecutor(b []byte) error {
	s.mu.Lock()
	c := s.current
	s.mu.Unlock()
	if c == nil {
		return errors.New("fakeaiwg: no executor stream")
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return c.WriteMessage(websocket.TextMessage, b)
}

// SendToExecutor writes v as a JSON text frame to the current executor stream.
func (s *Server) SendToExecutor(v any) error {
	s.mu.Lock()
	c := s.current
	s.mu.Unlock()
	if c == nil {
		return errors.New("fakeaiwg: no executor stream")
	}
	return c.writeJSON(v)
}

// SandboxStreamConnected reports whether a sandbox stream is open.
func (s *Server) SandboxStreamConnected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sandboxOpen > 0
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func readBody(w http.ResponseWriter, r *http.Request) (map[string]any, bool) {
	var body map[string]any
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&body); err != nil {
		http.Error(w, `{"error":"malformed JSON"}`, http.StatusBadRequest)
		return nil, false
	}
	return body, true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) registerSandbox(w http.ResponseWriter, r *http.Request) {
	s.register(w, r, &s.sandboxRegs, &s.sbxRegStatus, s.sandboxTokens, nil, "sandbox_id", func(body map[string]any, n int) string {
		// The same instance keeps its sandbox id, as a real registry would.
		id, _ := body["instance_id"].(string)
		if id == "" {
			id = strconv.Itoa(n)
		}
		return "sbx-" + id
	})
}

func (s *Server) registerExecutor(w http.ResponseWriter, r *http.Request) {
	s.register(w, r, &s.executorRegs, &s.execRegStatus, s.execTokens, &s.lastExecToken, "executor_id", func(body map[string]any, n int) string {
		id, _ := body["executor_id"].(string)
		if id == "" {
			id = "exec-" + strconv.Itoa(n)
		}
		return id
	})
}

// register keeps a registration's body in regs and answers with the status
// a test set, or with the id idOf names (n: the registrations so far) under
// idKey and a new token for its stream, kept in tokens (and last).
func (s *Server) register(w http.ResponseWriter, r *http.Request, regs *[]map[string]any, status *int, tokens map[string]string,
	last *string, idKey string, idOf func(body map[string]any, n int) string) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	*regs = append(*regs, body)
	if code := *status; code != 0 {
		s.mu.Unlock()
		http.Error(w, http.StatusText(code), code)
		return
	}
	id := idOf(body, len(*regs))
	tok := newToken()
	tokens[id] = tok
	if last != nil {
		*last = tok
	}
	s.tokens = append(s.tokens, tok)
	s.mu.Unlock()
	writeJSON(w, map[string]string{idKey: id, "token": tok})
}

// accept checks the stream's token and upgrades; nil when refused.
func (s *Server) accept(w http.ResponseWriter, r *http.Request, tokens map[string]string, status int) *wsConn {
	s.mu.Lock()
	want, known := tokens[r.PathValue("id")]
	closed := s.closed
	s.mu.Unlock()
	if closed {
		http.Error(w, "closing", http.StatusServiceUnavailable)
		return nil
	}
	if status != 0 {
		http.Error(w, http.StatusText(status), status)
		return nil
	}
	if !known || r.URL.Query().Get("token") != want {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return nil
	}
	conn, err := s.up.Upgrade(w, r, nil)
	if err != nil {
		return nil
	}
	c := &wsConn{Conn: conn}
	s.mu.Lock()
	s.open[c] = struct{}{}
	s.mu.Unlock()
	return c
}

func (s *Server) forget(c *wsConn) {
	s.mu.Lock()
	delete(s.open, c)
	s.sandboxConns = slices.DeleteFunc(s.sandboxConns, func(x *wsConn) bool { return x == c })
	if s.current == c {
		s.current = nil
	}
	s.mu.Unlock()
	_ = c.Close()
}

func (s *Server) sandboxStream(w http.ResponseWriter, r *http.Request) {
	c := s.accept(w, r, s.sandboxTokens, 0)
	if c == nil {
		return
	}
	s.mu.Lock()
	s.sandboxOpen++
	s.sandboxConns = append(s.sandboxConns, c)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.sandboxOpen--
		s.mu.Unlock()
		s.forget(c)
	}()
	for {
		// Pings are answered by the library's default handler while reading.
		if _, _, err := c.ReadMessage(); err != nil {
			return
		}
	}
}

func (s *Server) executorStream(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	status := s.execWSStatus
	s.mu.Unlock()
	c := s.accept(w, r, s.execTokens, status)
	if c == nil {
		return
	}
	s.mu.Lock()
	s.execConns++
	n := s.execConns
	s.current = c
	s.mu.Unlock()
	defer s.forget(c)
	for {
		mt, data, err := c.ReadMessage()
		if err != nil {
			return
		}
		if mt == websocket.TextMessage {
			s.record(parseFrame(n, data))
		}
	}
}

func (s *Server) record(f Frame) {
	s.mu.Lock()
	s.frames = append(s.frames, f)
	close(s.frameAdded)
	s.frameAdded = make(chan struct{})
	s.mu.Unlock()
}

// parseFrame reads the envelope fields; a frame that is not a JSON object
// is still recorded, with only Raw set.
func parseFrame(conn int, raw []byte) Frame {
	f := Frame{Conn: conn, Raw: raw}
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return f
	}
	f.Event, _ = m["event"].(string)
	f.ExecutorID, _ = m["executor_id"].(string)
	f.TS, _ = m["ts"].(string)
	var mid any
	mid, f.HasMissionID = m["mission_id"]
	f.MissionID, _ = mid.(string)
	f.Data, _ = m["data"].(map[string]any)
	return f
}
