package agentd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
)

// An egress tunnel on a connection of its own to the server (see
// agentrpc's TunnelRawPath): the destination goes in the upgrade request,
// the server checks it against the environment's policy and dials it, and
// after its 101 the connection carries the tunnel's raw bytes. Between the
// command's socket and that connection the kernel splices them. A serial
// link (one connection only), AGENT_NO_TUNNEL_RAW=1, or a server that does
// not know the route (404) keep the Tunnel stream.

// rawTunnels reports whether tunnels go on connections of their own.
func (a *Agent) rawTunnels() bool {
	return a.rawDial != nil && !a.cfg.NoTunnelRaw && !a.noRawTunnels.Load()
}

// tunnelRawCapability is what the agent registers with
// (Registration.tunnel_raw). A registration tries raw tunnels again after a
// server that did not know them: the server may be a newer one now.
func (a *Agent) tunnelRawCapability() bool {
	a.noRawTunnels.Store(false)
	return a.rawTunnels()
}

// errRawTunnelUnknown: the server does not serve TunnelRawPath.
var errRawTunnelUnknown = errors.New("the server does not take raw tunnels")

// tunnelRefused is the server's refusal of a raw tunnel: denied by the
// policy (403) or its destination unreachable or the server unable
// (anything else).
type tunnelRefused struct {
	denied bool
	reason string
}

func (r *tunnelRefused) Error() string { return r.reason }

// openRawTunnel opens a connection of its own to the server for a tunnel
// to host:port and upgrades it; what the server sent after its answer is
// in early. A refusal is a *tunnelRefused; a 404 is errRawTunnelUnknown.
func (a *Agent) openRawTunnel(ctx context.Context, host string, port int) (conn net.Conn, early []byte, err error) {
	conn, br, resp, err := a.rawUpgrade(ctx, agentwire.TunnelRawPath, agentwire.TunnelRawProtocol,
		agentwire.HeaderTunnelTo, net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		_ = conn.Close()
		reason := strings.TrimSpace(string(body))
		switch {
		case resp.StatusCode == http.StatusNotFound && resp.Header.Get(agentwire.HeaderTunnelRefused) == "":
			return nil, nil, errRawTunnelUnknown
		case resp.StatusCode == http.StatusForbidden:
			return nil, nil, &tunnelRefused{denied: true, reason: reason}
		case reason == "":
			reason = resp.Status
		case resp.Header.Get(agentwire.HeaderTunnelRefused) == "":
			reason = resp.Status + ": " + reason
		}
		return nil, nil, &tunnelRefused{reason: reason}
	}
	_ = resp.Body.Close()
	if !strings.EqualFold(resp.Header.Get("Upgrade"), agentwire.TunnelRawProtocol) {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("the server switched to %q, not %s", resp.Header.Get("Upgrade"), agentwire.TunnelRawProtocol)
	}
	_ = conn.SetDeadline(time.Time{})
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		early = bytes.Clone(b)
	}
	return conn, early, nil
}

// proxyRaw carries the proxy client c's connection to host:port on a
// connection of its own. It answers false, having written nothing to c,
// when the server does not take raw tunnels: the caller then opens a
// Tunnel stream.
func (a *Agent) proxyRaw(ctx context.Context, c net.Conn, br *bufio.Reader, req *http.Request, host string, port int, head []byte) bool {
	raw, early, err := a.openRawTunnel(ctx, host, port)
	var refused *tunnelRefused
	switch {
	case errors.Is(err, errRawTunnelUnknown):
		a.noRawTunnels.Store(true)
		a.log.Info("the management server takes no raw tunnels: egress goes on Tunnel streams until the agent registers again")
		return false
	case errors.As(err, &refused) && refused.denied:
		proxyError(c, http.StatusForbidden, fmt.Sprintf("egress to %s:%d refused: %s", host, port, refused.reason))
		return true
	case errors.As(err, &refused):
		proxyError(c, http.StatusBadGateway, fmt.Sprintf("egress to %s:%d failed: %s", host, port, refused.reason))
		return true
	case err != nil:
		proxyError(c, http.StatusBadGateway, "the management server cannot be reached: "+err.Error())
		return true
	}
	if req.Method == http.MethodConnect {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			_ = raw.Close()
			return true
		}
	}
	// What was read past the request (a client that did not wait for the
	// 200) or sent by the destination before the first read goes first;
	// from there, socket to socket.
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		head = append(head, b...)
	}
	if len(head) > 0 {
		if _, err := raw.Write(head); err != nil {
			_ = raw.Close()
			return true
		}
	}
	if len(early) > 0 {
		if _, err := c.Write(early); err != nil {
			_ = raw.Close()
			return true
		}
	}
	// The agent stopping ends its tunnels, as it does its Tunnel streams.
	stop := context.AfterFunc(ctx, func() { _ = raw.Close(); _ = c.Close() })
	defer stop()
	pipeRaw(c, raw, raw)
	return true
}
