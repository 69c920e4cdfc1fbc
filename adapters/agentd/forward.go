package agentd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"connectrpc.com/connect"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
)

// Connections into this environment (previews, port-forward): the server
// asks with a PortDial; the agent dials the port here and carries the
// connection on a Forward stream of its own.

type forwardStream = *connect.BidiStreamForClient[sandboxv1.ForwardRequest, sandboxv1.ForwardResponse]

// forwardDialTimeout bounds the dial of a port inside.
const forwardDialTimeout = 5 * time.Second

// forwardPort serves one PortDial.
func (a *Agent) forwardPort(ctx context.Context, req *sandboxv1.PortDial) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, dialErr := dialInside(ctx, req.GetAddress(), req.GetPort())
	if dialErr == nil {
		err := a.forwardRaw(ctx, req.GetForwardId(), c)
		if err == nil {
			return
		}
		if !errors.Is(err, errNoRawForward) {
			a.log.Debug("forward on a connection of its own failed; carried on the link instead", "forward_id", req.GetForwardId(), "err", err)
		}
	}
	stream := a.files.Forward(ctx)
	a.signIn(stream.RequestHeader())
	opened := &sandboxv1.ForwardOpened{ForwardId: req.GetForwardId()}
	if dialErr != nil {
		opened.Error = dialErr.Error()
		opened.NotListening = errors.Is(dialErr, syscall.ECONNREFUSED)
	}
	if err := stream.Send(&sandboxv1.ForwardRequest{Payload: &sandboxv1.ForwardRequest_Opened{Opened: opened}}); err != nil || dialErr != nil {
		if c != nil {
			_ = c.Close()
		}
		if err != nil {
			a.log.Debug("forward not opened", "forward_id", req.GetForwardId(), "err", err)
		}
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
		return
	}
	pipeForward(c, stream)
}

// dialInside connects to port on address, which must be this environment's
// own: loopback, unspecified (taken as loopback), or an address of one of
// its interfaces. Nothing outside is ever dialed this way.
func dialInside(ctx context.Context, address string, port uint32) (net.Conn, error) {
	if port == 0 || port > 65535 {
		return nil, fmt.Errorf("port %d: want 1-65535", port)
	}
	v4, v6 := netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()
	var targets []netip.Addr
	switch ip, err := netip.ParseAddr(address); {
	case address == "":
		targets = []netip.Addr{v4, v6}
	case err != nil:
		return nil, fmt.Errorf("address %q: not an IP address", address)
	case ip.Unmap().IsUnspecified() && ip.Unmap().Is4():
		targets = []netip.Addr{v4}
	case ip.IsUnspecified():
		// A dual-stack socket takes IPv4 too, and IPv6 may be off here.
		targets = []netip.Addr{v6, v4}
	default:
		ip = ip.Unmap().WithZone("")
		if !ip.IsLoopback() && !ownAddress(ip) {
			return nil, fmt.Errorf("address %s is not this environment's", ip)
		}
		targets = []netip.Addr{ip}
	}
	var firstErr error
	d := net.Dialer{Timeout: forwardDialTimeout}
	for _, ip := range targets {
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ip.String(), strconv.Itoa(int(port))))
		if err == nil {
			return c, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, firstErr
}

// ownAddress reports whether ip is an address of one of this machine's
// (this environment's) interfaces.
func ownAddress(ip netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Unmap() == ip {
			return true
		}
	}
	return false
}

// pipeForward copies port ↔ stream until both directions are done or
// either side goes away.
func pipeForward(c net.Conn, stream forwardStream) {
	done := make(chan struct{})
	go func() { // port → server
		defer close(done)
		buf := make([]byte, 256<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if stream.Send(&sandboxv1.ForwardRequest{Payload: &sandboxv1.ForwardRequest_Data{Data: buf[:n]}}) != nil {
					return
				}
			}
			if err != nil {
				_ = stream.Send(&sandboxv1.ForwardRequest{Payload: &sandboxv1.ForwardRequest_CloseWrite{CloseWrite: true}})
				return
			}
		}
	}()
	for { // server → port
		m, err := stream.Receive()
		if err != nil {
			// The server ended the connection (or went): close it here,
			// which also ends the reader above.
			break
		}
		if m.GetCloseWrite() {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			continue
		}
		if b := m.GetData(); len(b) > 0 {
			if _, err := c.Write(b); err != nil {
				break
			}
		}
	}
	_ = c.Close()
	_ = stream.CloseResponse()
	<-done
	_ = stream.CloseRequest()
}
