package rest

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/changes"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

const changesRoute = http.MethodGet + " /api/v1/changes"

// changesKeepAlive is how often an idle change stream sends a comment.
const changesKeepAlive = 15 * time.Second

// WatchChanges implements restapi.StrictServerInterface; watchChanges
// serves it.
func (s *Server) WatchChanges(context.Context, restapi.WatchChangesRequestObject) (restapi.WatchChangesResponseObject, error) {
	return nil, errors.New("GET /api/v1/changes is served by watchChanges")
}

// watchChanges streams which collections changed, at most one event per
// interval: a watcher that reads slowly makes its own events fewer, never
// the server's work slower.
func (s *Server) watchChanges(w http.ResponseWriter, r *http.Request) {
	interval := 250 * time.Millisecond
	if v := r.URL.Query().Get("interval_ms"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 50 || n > 10000 {
			_ = badRequest("interval_ms: an integer from 50 to 10000").write(w)
			return
		}
		interval = time.Duration(n) * time.Millisecond
	}
	watcher, stop := s.d.Changes.Watch()
	defer stop()
	rc := startSSE(w)
	all := ports.ChangeKind(0)
	for _, k := range ports.ChangeKinds {
		all |= k.Kind
	}
	// A browser that loses the stream tries again after a second, not its
	// default of about three.
	if _, err := w.Write([]byte("retry: 1000\n\n")); err != nil {
		return
	}
	if writeSSE(w, "hello", "", map[string][]string{"kinds": changes.Names(all)}) != nil || rc.Flush() != nil {
		return
	}
	keepAlive := time.NewTicker(changesKeepAlive)
	defer keepAlive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepAlive.C:
			if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil || rc.Flush() != nil {
				return
			}
		case <-watcher.Wake():
			kinds := watcher.Take()
			if kinds == 0 {
				continue
			}
			if writeSSE(w, "changed", "", map[string][]string{"kinds": changes.Names(kinds)}) != nil || rc.Flush() != nil {
				return
			}
			// Coalesce: what changes meanwhile is sent once, after.
			select {
			case <-r.Context().Done():
				return
			case <-time.After(interval):
			}
		}
	}
}
