package rest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// forwardRoute upgrades its connection to a raw TCP stream into an
// environment (agenticctl port-forward); served outside the strict server.
const forwardRoute = http.MethodGet + " /api/v1/environments/{name}/ports/{port}/forward"

// ForwardProtocol is the Upgrade token of the forward route.
const ForwardProtocol = "agentic-port-forward"

// ForwardPort is never reached: forwardPort serves the route.
func (s *Server) ForwardPort(context.Context, restapi.ForwardPortRequestObject) (restapi.ForwardPortResponseObject, error) {
	return nil, errors.New("GET …/ports/{port}/forward is served by forwardPort")
}

// forwardError maps an error of PortDialer.DialPort.
func forwardError(err error, subject string) *apiError {
	switch {
	case errors.Is(err, ports.ErrAgentNotConnected), errors.Is(err, ports.ErrAgentNotFound):
		return newError(http.StatusConflict, "agent_not_connected", "%s: the environment's agent is not connected; retry once it has reconnected", subject)
	case errors.Is(err, ports.ErrPortNotListening):
		return newError(http.StatusBadGateway, "port_not_listening", "%s: nothing listens on that port inside the environment (GET …/ports lists those that do)", subject)
	case errors.Is(err, ports.ErrTooManyForwards):
		e := newError(http.StatusServiceUnavailable, "too_many_forwards", "%s: the environment holds as many forwarded connections as it may; close some, or retry later", subject)
		e.retryAfter = 1
		return e
	case errors.Is(err, ports.ErrPortRefused):
		return newError(http.StatusForbidden, "port_refused", "%s: that port may not be reached through the agent", subject)
	default:
		return newError(http.StatusBadGateway, "agent_error", "%s: %v", subject, err)
	}
}

// upgradeAsked says whether r asks to switch to the forward protocol:
// Connection names upgrade and Upgrade names agentic-port-forward.
func upgradeAsked(r *http.Request) bool {
	if r.ProtoMajor != 1 {
		return false // only an HTTP/1 connection can be handed over
	}
	return headerHasToken(r.Header, "Connection", "upgrade") && headerHasToken(r.Header, "Upgrade", ForwardProtocol)
}

// headerHasToken says whether a comma-separated header (any of its lines)
// lists token, in any case.
func headerHasToken(h http.Header, name, token string) bool {
	for _, line := range h.Values(name) {
		for _, t := range strings.Split(line, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// forwardPort opens the connection inside first, so that every refusal is
// an ordinary JSON answer; then it answers 101 and carries the bytes both
// ways until both sides are done.
func (s *Server) forwardPort(w http.ResponseWriter, r *http.Request) {
	e, apiErr := s.lookupEnvironment(r.Context(), r.PathValue("name"))
	if apiErr != nil {
		_ = apiErr.write(w)
		return
	}
	n, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		n = 0
	}
	port, apiErr := portNumber(n)
	if apiErr != nil {
		_ = apiErr.write(w)
		return
	}
	subject := fmt.Sprintf("port %d of environment %q", port, clip(e.Name))
	if !upgradeAsked(r) {
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", ForwardProtocol)
		writeError(w, http.StatusUpgradeRequired, "upgrade_required", fmt.Sprintf(
			"%s: send 'Connection: Upgrade' and 'Upgrade: %s' over HTTP/1.1 (agenticctl port-forward does)", subject, ForwardProtocol))
		return
	}
	if e.AgentID == "" || s.d.Forwards == nil {
		_ = forwardError(ports.ErrAgentNotConnected, subject).write(w)
		return
	}
	inside, err := s.d.Forwards.DialPort(r.Context(), e.AgentID, port)
	if err != nil {
		if r.Context().Err() != nil {
			return // the caller went away: nobody to answer
		}
		_ = forwardError(err, subject).write(w)
		return
	}
	client, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = inside.Close()
		writeError(w, http.StatusUpgradeRequired, "upgrade_required", fmt.Sprintf("%s: this connection cannot be handed over (%v); use HTTP/1.1", subject, err))
		return
	}
	if sw, ok := w.(*statusWriter); ok {
		sw.status = http.StatusSwitchingProtocols
	}
	// The server's read and write deadlines are for requests, not for a
	// stream that lives as long as its two ends (the dialer closes one
	// idle both ways).
	_ = client.SetDeadline(time.Time{})
	_, _ = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + ForwardProtocol + "\r\n\r\n")
	if err := buf.Flush(); err != nil {
		_ = client.Close()
		_ = inside.Close()
		return
	}
	start := time.Now()
	// What the client sent after its request is in buf's reader already.
	in, out := splice(client, buf.Reader, inside)
	s.log.DebugContext(r.Context(), "rest: port forward ended", "environment", e.Name, "port", port, "bytes_in", in, "bytes_out", out, "duration", time.Since(start))
}

// splice copies client's bytes (read through clientR) to inside and
// inside's to client until both directions end. The end of one side's
// bytes ends the other side's write side (a half-close) where it can; an
// error either way, or a side that cannot half-close, ends both. Both are
// closed when it returns.
func splice(client net.Conn, clientR io.Reader, inside ports.Conn) (in, out int64) {
	var (
		wg   sync.WaitGroup
		once sync.Once
	)
	closeBoth := func() {
		once.Do(func() {
			_ = client.Close()
			_ = inside.Close()
		})
	}
	oneWay := func(dst io.WriteCloser, src io.Reader, n *int64) {
		defer wg.Done()
		c, err := io.Copy(dst, src)
		*n = c
		if err == nil { // src ended: pass the end on
			if hc, ok := dst.(ports.HalfCloser); ok && hc.CloseWrite() == nil {
				return
			}
		}
		closeBoth()
	}
	wg.Add(2)
	go oneWay(inside, clientR, &in)
	go oneWay(client, inside, &out)
	wg.Wait()
	closeBoth()
	return in, out
}
