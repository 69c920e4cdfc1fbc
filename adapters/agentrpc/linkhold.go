package agentrpc

import (
	"context"
	"net"
	"net/http"
	"sync"
	"syscall"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// LinkHold ends the link of an agent whose environment is being saved with
// its memory, and keeps it ended until released (ports.LinkQuiescer). CRIU
// refuses to dump a process holding a stream socket to the outside, and an
// agent holds more than its Connect stream: the HTTP/2 connection under
// it, idle keep-alive connections, raw data connections. So the hold works
// on connections, not streams: every connection that carried a request
// naming an agent (its id header, sent on every agent request) is noted
// under that agent, and QuiesceLink closes them all; while held, a request
// naming it is answered 503 (what a sign-in the server cannot take now
// gets: the agent backs off and retries) and its connection closed.
//
// Set ConnContext on the agent listeners' http.Server and wrap their
// handler with Gate. A request naming an agent it is not is authenticated
// later as usual; noting its connection under that name only lets a hold
// of that agent close it.
type LinkHold struct {
	mu    sync.Mutex
	held  map[string]int
	conns map[string]map[*heldConn]struct{}
	// byConn finds a noted connection's entry when it closes.
	byConn map[net.Conn]*heldConn
}

var _ ports.LinkQuiescer = (*LinkHold)(nil)

// NewLinkHold returns a hold that holds nobody.
func NewLinkHold() *LinkHold {
	return &LinkHold{held: map[string]int{}, conns: map[string]map[*heldConn]struct{}{}, byConn: map[net.Conn]*heldConn{}}
}

// heldConn is one accepted connection and the agents it carried requests
// of (LinkHold.mu).
type heldConn struct {
	net.Conn
	agents []string
}

type heldConnKey struct{}

// ConnContext is http.Server.ConnContext: it keeps the connection where
// Gate finds it.
func (h *LinkHold) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, heldConnKey{}, &heldConn{Conn: c})
}

// ConnState is http.Server.ConnState: a closed connection is forgotten. A
// hijacked one (a raw data connection) is kept, to be closed by a hold,
// until noting another of its agent's finds it closed (pruneLocked): it
// cannot be wrapped to hear its close, which would cost its splice(2).
func (h *LinkHold) ConnState(c net.Conn, st http.ConnState) {
	if st != http.StateClosed {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if hc, ok := h.byConn[c]; ok {
		h.forgetLocked(hc)
	}
}

func (h *LinkHold) forgetLocked(hc *heldConn) {
	delete(h.byConn, hc.Conn)
	for _, id := range hc.agents {
		if set := h.conns[id]; set != nil {
			delete(set, hc)
			if len(set) == 0 {
				delete(h.conns, id)
			}
		}
	}
}

// pruneSize is how many connections of one agent are noted before the
// closed ones among them are looked for.
const pruneSize = 16

// pruneLocked forgets the connections in set that are closed.
func (h *LinkHold) pruneLocked(set map[*heldConn]struct{}) {
	for hc := range set {
		if closedConn(hc.Conn) {
			h.forgetLocked(hc)
		}
	}
}

// closedConn reports whether c's descriptor is closed already.
func closedConn(c net.Conn) bool {
	if t, ok := c.(interface{ NetConn() net.Conn }); ok { // TLS
		c = t.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	return rc.Control(func(uintptr) {}) != nil
}

// Gate notes under its agent the connection of each request naming one,
// and refuses the requests of a held agent.
func (h *LinkHold) Gate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(HeaderAgentID)
		hc, _ := r.Context().Value(heldConnKey{}).(*heldConn)
		if id == "" || hc == nil {
			next.ServeHTTP(w, r)
			return
		}
		h.mu.Lock()
		held := h.held[id] > 0
		if !held {
			set := h.conns[id]
			if set == nil {
				set = map[*heldConn]struct{}{}
				h.conns[id] = set
			}
			if _, noted := set[hc]; !noted {
				if len(set) >= pruneSize {
					h.pruneLocked(set)
				}
				set[hc] = struct{}{}
				hc.agents = append(hc.agents, id)
				h.byConn[hc.Conn] = hc
				h.conns[id] = set
			}
		}
		h.mu.Unlock()
		if held {
			// No connection may stay open for the dump: answered, it goes.
			w.Header().Set("Connection", "close")
			http.Error(w, "this agent's environment is being saved; try again later", http.StatusServiceUnavailable)
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			_ = hc.Close()
			return
		}
		next.ServeHTTP(w, r)
	})
}

// QuiesceLink implements ports.LinkQuiescer.
func (h *LinkHold) QuiesceLink(_ context.Context, agentID string) (func(), error) {
	h.mu.Lock()
	h.held[agentID]++
	var open []*heldConn
	for hc := range h.conns[agentID] {
		open = append(open, hc)
	}
	for _, hc := range open {
		h.forgetLocked(hc)
	}
	h.mu.Unlock()
	for _, hc := range open {
		_ = hc.Close()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.held[agentID]--; h.held[agentID] <= 0 {
				delete(h.held, agentID)
			}
		})
	}, nil
}

// Held reports whether agentID's link is held now.
func (h *LinkHold) Held(agentID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held[agentID] > 0
}
