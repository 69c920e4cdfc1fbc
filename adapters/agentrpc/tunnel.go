package agentrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/agentic-sandbox/agentic-sandbox/core/egress"
	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
)

type tunnelServerStream = *connect.BidiStream[sandboxv1.TunnelRequest, sandboxv1.TunnelResponse]

// EgressPolicy says which destinations an agent's environment may reach
// through its tunnels; ok is false for an agent with no egress at all.
type EgressPolicy interface {
	EgressRules(agentID string) (rules []egress.Rule, ok bool)
}

// EgressRecord is one tunnel, as logged and counted.
type EgressRecord struct {
	AgentID, Host string
	Port          int
	Allowed       bool
	Reason        string
	BytesUp       int64 // client → destination
	BytesDown     int64
	Duration      time.Duration
}

// Egress is the tunnels' configuration: the policy, how names resolve (a
// test may replace it), and who hears of each tunnel.
type Egress struct {
	Policy  EgressPolicy
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	Observe func(EgressRecord)
	// Active, when set, hears of a tunnel's traffic as it moves: called
	// with the agent's id once per message or read that carries bytes
	// (either way), never per byte; it must return quickly.
	Active   func(agentID string)
	DialWait time.Duration
	// MaxTunnels bounds the connections one environment keeps open at
	// once (default DefaultMaxTunnels).
	MaxTunnels int
}

// DefaultMaxTunnels is how many tunnels an environment may hold open.
const DefaultMaxTunnels = 256

// withDefaults fills what is not configured: the system resolver, a 10 s
// dial, DefaultMaxTunnels.
func (e Egress) withDefaults() Egress {
	if e.Resolve == nil {
		e.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if e.DialWait <= 0 {
		e.DialWait = 10 * time.Second
	}
	if e.MaxTunnels <= 0 {
		e.MaxTunnels = DefaultMaxTunnels
	}
	return e
}

// Tunnel implements the Tunnel RPC: one TCP connection of a command
// through its agent's egress proxy, checked against the environment's
// allowed hosts before anything is dialed.
func (s *Service) Tunnel(ctx context.Context, stream tunnelServerStream) error {
	id, first, err := opened(&s.auth, stream, "a tunnel open")
	if err != nil {
		return err
	}
	open := first.GetOpen()
	if open == nil || open.GetHost() == "" || len(open.GetHost()) > 255 || open.GetPort() == 0 || open.GetPort() > 65535 {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the first message must name a host and a port"))
	}
	rec, end, ok := s.beginTunnel(id, open.GetHost(), int(open.GetPort()), "stream")
	if !ok {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("%d tunnels open, the limit", s.cfg.Egress.MaxTunnels))
	}
	defer end()
	e := s.cfg.Egress
	dst, rule, ref := s.dialEgress(ctx, rec)
	if ref != nil {
		return stream.Send(&sandboxv1.TunnelResponse{Payload: &sandboxv1.TunnelResponse_Opened{Opened: &sandboxv1.TunnelOpened{Reason: ref.reason, Denied: ref.denied}}})
	}
	defer func() { _ = dst.Close() }()
	// A stream the agent drops (it died, or its client went away) ends the
	// connection, even when the destination says nothing more: a tunnel
	// must not hold its place, a socket and a goroutine, until then.
	stopWatch := context.AfterFunc(ctx, func() { _ = dst.Close() })
	defer stopWatch()
	if err := stream.Send(&sandboxv1.TunnelResponse{Payload: &sandboxv1.TunnelResponse_Opened{Opened: &sandboxv1.TunnelOpened{Allowed: true, Reason: rule}}}); err != nil {
		return nil
	}
	var up, down atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // agent → destination
		defer wg.Done()
		for {
			m, err := stream.Receive()
			if errors.Is(err, io.EOF) {
				_ = dst.CloseWrite()
				return
			}
			if err != nil {
				_ = dst.Close()
				return
			}
			if m.GetCloseWrite() {
				_ = dst.CloseWrite()
				return
			}
			if b := m.GetData(); len(b) > 0 {
				if _, err := dst.Write(b); err != nil {
					return
				}
				up.Add(int64(len(b)))
				if e.Active != nil {
					e.Active(id)
				}
			}
		}
	}()
	// destination → agent, until the destination closes or the agent goes.
	buf := make([]byte, 256<<10) // large messages: per-message framing is most of the cost
	for {
		n, err := dst.Read(buf)
		if n > 0 {
			if serr := stream.Send(&sandboxv1.TunnelResponse{Payload: &sandboxv1.TunnelResponse_Data{Data: buf[:n]}}); serr != nil {
				break
			}
			down.Add(int64(n))
			if e.Active != nil {
				e.Active(id)
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				rec.Reason = rule + "; " + err.Error()
			}
			break
		}
	}
	// The agent closes its side once told; a stream is never left waiting
	// on an agent that does not.
	_ = stream.Send(&sandboxv1.TunnelResponse{Payload: &sandboxv1.TunnelResponse_Eof{Eof: true}})
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	// (Past the wait, the reader ends when the handler's return closes the
	// request.)
	_ = dst.Close()
	rec.BytesUp, rec.BytesDown = up.Load(), down.Load()
	return nil
}

// beginTunnel takes one of id's tunnel places and starts its record; end
// gives the place back and logs and reports the record. ok is false when
// the agent holds its limit already (nothing is recorded then). Both kinds
// of tunnel go through it; kind ("stream": a Tunnel stream, "raw": a
// connection of its own) is logged.
func (s *Service) beginTunnel(id, host string, port int, kind string) (rec *EgressRecord, end func(), ok bool) {
	e := s.cfg.Egress
	limit := e.MaxTunnels
	if e.Policy == nil {
		limit = 0 // refused at once: not counted against a bound
	}
	if !s.tunnels.take(id, limit) {
		return nil, nil, false
	}
	rec = &EgressRecord{AgentID: id, Host: host, Port: port}
	start := s.cfg.Clock.Now()
	return rec, func() {
		s.tunnels.release(id)
		rec.Duration = s.cfg.Clock.Now().Sub(start)
		s.log.Info("egress", "agent_id", rec.AgentID, "host", rec.Host, "port", rec.Port, "allowed", rec.Allowed, "reason", rec.Reason,
			"bytes_up", rec.BytesUp, "bytes_down", rec.BytesDown, "duration", rec.Duration, "tunnel", kind)
		if e.Observe != nil {
			e.Observe(*rec)
		}
	}, true
}

// tunnelRefusal is why a tunnel was not opened: denied by the policy (or
// no egress at all), or its destination could not be reached.
type tunnelRefusal struct {
	reason string
	denied bool
}

// dialEgress checks rec's destination against its agent's egress policy
// and dials it; on success rec is marked allowed by the rule that allowed
// it, on a refusal rec carries its reason.
func (s *Service) dialEgress(ctx context.Context, rec *EgressRecord) (dst *net.TCPConn, rule string, ref *tunnelRefusal) {
	e := s.cfg.Egress
	refuse := func(reason string, denied bool) (*net.TCPConn, string, *tunnelRefusal) {
		rec.Reason = reason
		return nil, "", &tunnelRefusal{reason: reason, denied: denied}
	}
	if e.Policy == nil {
		return refuse("this server gives no egress", true)
	}
	rules, ok := e.Policy.EgressRules(rec.AgentID)
	if !ok {
		return refuse("this environment has no egress (network mode is not proxy)", true)
	}
	d := egress.Decide(rules, rec.Host, rec.Port, func(h string) ([]netip.Addr, error) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return e.Resolve(rctx, h)
	})
	if !d.Allowed {
		return refuse(d.Reason, true)
	}
	dctx, cancel := context.WithTimeout(ctx, e.DialWait)
	c, err := (&net.Dialer{}).DialContext(dctx, "tcp", d.Addr.String())
	cancel()
	if err != nil {
		return refuse(fmt.Sprintf("%s:%d (%s): %v", rec.Host, rec.Port, d.Addr, err), false)
	}
	rec.Allowed, rec.Reason = true, d.Rule
	return c.(*net.TCPConn), d.Rule, nil
}
