package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
)

// Connected reports whether the stream is up.
func (a *Agent) Connected() bool { return a.connected.Load() }

// Run connects and serves until ctx ends, reconnecting with backoff.
func (a *Agent) Run(ctx context.Context) error {
	defer a.perms.removeDir()
	if me := a.ident.Load(); a.cfg.IdentityFromLink && me.Secret == "" {
		if err := a.identityFromLink(ctx); err != nil {
			return nil // ctx ended
		}
	}
	if a.tmux {
		a.adoptTmuxSessions(ctx)
	}
	if a.cfg.EgressListen != "" {
		ln, err := net.Listen("tcp", a.cfg.EgressListen)
		if err != nil {
			return fmt.Errorf("egress proxy: %w", err)
		}
		a.log.Info("egress proxy listening", "addr", ln.Addr().String())
		go func() { _ = a.ServeEgress(ctx, ln) }()
	}
	backoff := a.cfg.BackoffMin
	for {
		registered, err := a.serve(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errRenamed) {
			continue // the server waits for the new identity: no backoff
		}
		if registered {
			backoff = a.cfg.BackoffMin
		}
		wait := jitter(backoff)
		if errors.Is(err, errDrained) {
			// The server is restarting: its successor is usually up within
			// a second, and a refused attempt falls back to the backoff.
			wait = jitter(min(backoff, drainedRetry))
		}
		if registered && a.serialLink() {
			// A VM's link whose host side went away: its relay ended (the
			// VM hibernates, the server restarts) or dropped a stale
			// stream. The dial's first write waits in the guest kernel
			// until a host side is back, so one attempt right away costs
			// nothing, and a VM woken from hibernation reconnects in
			// milliseconds instead of BackoffMin; a refused attempt falls
			// back to the backoff.
			wait = jitter(min(wait, serialRedial))
		}
		if connect.CodeOf(err) == connect.CodeUnauthenticated {
			a.log.Error("management server rejected this agent's credentials; will retry", "retry_in", wait)
		} else {
			a.log.Warn("agent stream ended; reconnecting", "err", err, "retry_in", wait)
		}
		if !a.waitToReconnect(ctx, wait) {
			return nil
		}
		if !registered {
			backoff = min(backoff*2, a.cfg.BackoffMax)
		}
	}
}

// jitter spreads reconnects of many agents by up to ±10%.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d)) //nolint:gosec // jitter needs no unpredictability
}

// serve runs one connection; registered says whether the server accepted us.
func (a *Agent) serve(ctx context.Context) (registered bool, err error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := a.client.Connect(cctx)
	me := a.signIn(stream.RequestHeader())
	if err := stream.Send(a.registration(me.ID)); err != nil {
		return false, drainErr(stream, err)
	}
	first, err := stream.Receive()
	if err != nil {
		return false, err
	}
	ack := first.GetRegistrationAck()
	if ack == nil || !ack.GetAccepted() {
		_ = stream.CloseRequest()
		return false, errors.New("registration not accepted: " + ack.GetMessage())
	}
	if s := ack.GetHeartbeatIntervalSeconds(); s > 0 {
		a.heartbeat.Store(int64(time.Duration(s) * time.Second))
	}
	a.connected.Store(true)
	defer a.connected.Store(false)
	a.log.Info("registered with management server", "server", a.cfg.ServerURL)
	a.clockFromRTC()

	// Heartbeats queued during a previous connection are stale.
	for len(a.control) > 0 {
		<-a.control
	}
	// The server counts the agent ready at its first heartbeat, so it must
	// not go before the ack: the connect report right behind it has to be
	// in before the server starts sessions on this connection, or it would
	// count them lost (the server's session reconcile rule).
	a.queueControl(a.connectHeartbeat())
	// Output sent on the last connection that its server did not
	// acknowledge (it may have died with it) goes again, first.
	a.out.requeue(ack.GetOutputAcks())
	// Queued behind any output still held, so the server learns which of
	// its commands this agent no longer runs.
	a.out.pushNow(a.sessionReport("connect:" + ack.GetConfig()["connection_id"]))
	// After the report (which tells a restarted server of the commands):
	// the questions still waiting, asked again.
	for _, ask := range a.perms.pending() {
		a.out.pushNow(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_PermissionRequest{PermissionRequest: ask}})
	}

	var wg sync.WaitGroup
	errc := make(chan error, 3)
	draining := make(chan struct{})
	recvEnded := make(chan struct{})
	wg.Add(4)
	go func() {
		defer wg.Done()
		defer close(recvEnded)
		for {
			msg, err := stream.Receive()
			if err != nil {
				errc <- err
				return
			}
			if r := msg.GetRename(); r != nil {
				if err := a.rename(r); err != nil {
					a.log.Error("rename refused", "err", err)
					continue
				}
				errc <- errRenamed
				return
			}
			if d := msg.GetDrain(); d != nil {
				select {
				case <-draining:
				default:
					a.log.Info("management server is draining this stream; connecting again", "reason", d.GetReason())
					close(draining)
				}
				continue
			}
			a.handle(cctx, msg)
		}
	}()
	// Output on the data plane when both ends take it (outputplane.go).
	var plane *outputPlane
	if ack.GetOutputDataPlane() && !a.cfg.NoOutputDataPlane {
		plane = a.newOutputPlane(cctx, ack.GetConfig()["connection_id"])
		plane.raw = ack.GetSessionRaw() && a.sessionRawCapable()
	}
	go func() { defer wg.Done(); errc <- a.sendLoop(cctx, stream, draining, plane) }()
	go func() { defer wg.Done(); a.heartbeatLoop(cctx) }()
	go func() { defer wg.Done(); a.portsLoop(cctx) }()

	err = <-errc
	if errors.Is(err, errDrained) {
		// The output data streams end first, after what they were given;
		// the server waits for them before its last acknowledgements.
		plane.finish(drainWait)
		// Our side ends here; the server reads up to this close, then ends
		// the stream. Cancelling first could cut off what is still in flight.
		_ = stream.CloseRequest()
		select {
		case <-recvEnded:
		case <-time.After(drainWait):
		case <-ctx.Done():
		}
	}
	cancel()
	plane.stop()
	_ = stream.CloseRequest()
	_ = stream.CloseResponse()
	wg.Wait()
	return true, err
}

func drainErr(stream linkStream, err error) error {
	// A failed Send hides the server's real error; Receive returns it.
	if errors.Is(err, io.EOF) {
		if _, rerr := stream.Receive(); rerr != nil {
			return rerr
		}
	}
	return err
}

// linkStream is the agent's side of the link's Connect stream.
type linkStream = *connect.BidiStreamForClient[sandboxv1.ConnectRequest, sandboxv1.ConnectResponse]

// errDrained ends a stream the server drained: the agent connects again.
var errDrained = errors.New("stream drained by the management server")

// drainedRetry is the wait before connecting again after a drain.
const drainedRetry = 500 * time.Millisecond

// serialRedial is the wait before connecting again after a registered
// stream over a serial link (a VM's virtio-serial port) ended.
const serialRedial = 100 * time.Millisecond

// serialLink reports whether the agent reaches its server over a serial
// port (the host's relay is the other end).
func (a *Agent) serialLink() bool { return strings.HasPrefix(a.cfg.ServerURL, "serial:") }

// drainWait bounds the wait, after a drained stream's side was closed, for
// the server to end it.
const drainWait = 5 * time.Second

// sendLoop sends the control messages and the outbox until the stream
// fails or the server drains it; a message leaves the outbox only once
// sent, so what is left goes on the next connection.
func (a *Agent) sendLoop(ctx context.Context, stream linkStream, draining <-chan struct{}, plane *outputPlane) error {
	var planeFailed <-chan error
	if plane != nil {
		planeFailed = plane.failed
	}
	for {
		select {
		case <-draining:
			return errDrained
		default:
		}
		select {
		case m := <-a.control:
			if err := stream.Send(m); err != nil {
				return err
			}
			continue
		default:
		}
		if m := a.out.peek(); m != nil {
			// The data plane takes output (and names where it ends in
			// results), else the message goes on this stream.
			switch r, send := plane.take(m); r {
			case routeTaken:
				a.out.pop()
			case routeDropped:
				a.out.drop()
			default:
				if err := stream.Send(send); err != nil {
					return err
				}
				a.out.pop()
				plane.sent(send)
			}
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-planeFailed:
			return err
		case <-draining:
			return errDrained
		case m := <-a.control:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-a.out.notify:
		}
	}
}

func (a *Agent) heartbeatLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.heartbeatAfter(time.Duration(a.heartbeat.Load())):
			a.queueControl(a.heartbeatMessage())
		}
	}
}

// queueControl never blocks: a control message that does not fit is dropped
// (the next heartbeat replaces it).
func (a *Agent) queueControl(m *sandboxv1.ConnectRequest) {
	select {
	case a.control <- m:
	default:
	}
}

func (a *Agent) registration(id string) *sandboxv1.ConnectRequest {
	host, _ := os.Hostname()
	// The machine's size and tools are looked up once: under TCG that
	// took ~9 ms of every registration, a pool member's take included.
	a.machineOnce.Do(func() { a.machine, a.tools = systemInfo(), detectCapabilities() })
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Registration{Registration: &sandboxv1.Registration{
		AgentId:      id,
		Hostname:     host,
		IpAddress:    primaryIP(),
		SystemInfo:   a.machine,
		Labels:       a.cfg.Labels,
		Runtime:      a.cfg.Runtime,
		AgentVersion: a.cfg.Version,
		Capabilities: a.tools,
		StdinAcks:    true,

		FileDataPlane: !a.cfg.NoFileDataPlane,
		TunnelRaw:     a.tunnelRawCapability(),

		OutputDataPlane: !a.cfg.NoOutputDataPlane,
		SessionRaw:      a.sessionRawCapable(),
	}}}
}

// detectCapabilities lists the tools found on this machine that sessions use.
func detectCapabilities() []string {
	var caps []string
	for _, tool := range []string{"tmux", "claude", "git"} {
		if _, err := exec.LookPath(tool); err == nil {
			caps = append(caps, tool)
		}
	}
	return caps
}

func (a *Agent) heartbeatMessage() *sandboxv1.ConnectRequest {
	m := readMetrics(&a.cpu)
	a.lastMetrics.Store(m)
	return a.heartbeatWith(m)
}

// connectHeartbeat is the heartbeat sent on connecting: with the last
// metrics read (at most one interval old) when there are any, as reading
// /proc took ~10 ms under TCG, on the way to being ready.
func (a *Agent) connectHeartbeat() *sandboxv1.ConnectRequest {
	if m := a.lastMetrics.Load(); m != nil {
		return a.heartbeatWith(m)
	}
	return a.heartbeatMessage()
}

func (a *Agent) heartbeatWith(m *sandboxv1.Metrics) *sandboxv1.ConnectRequest {
	a.mu.Lock()
	n := len(a.running)
	a.mu.Unlock()
	status := sandboxv1.AgentStatus_AGENT_STATUS_READY
	switch {
	case a.draining.Load():
		status = sandboxv1.AgentStatus_AGENT_STATUS_DRAINING
	case n > 0:
		status = sandboxv1.AgentStatus_AGENT_STATUS_BUSY
	}
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Heartbeat{Heartbeat: &sandboxv1.Heartbeat{
		Status:          status,
		SentAt:          timestamppb.Now(),
		RunningCommands: uint32(n), //nolint:gosec // a count of running commands
		Metrics:         m,
	}}}
}
