package agentd

import (
	"context"
	"maps"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace"
	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace/hopenv"
	"github.com/agentic-sandbox/agentic-sandbox/internal/telemetry/spanwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// handle is the command table: each message the server sends on the link
// (but rename and drain, which end the stream and so are the link loop's),
// to what acts on it.
func (a *Agent) handle(ctx context.Context, msg *sandboxv1.ConnectResponse) {
	switch p := msg.GetPayload().(type) {
	case *sandboxv1.ConnectResponse_Command:
		a.startCommand(p.Command)
	case *sandboxv1.ConnectResponse_Stdin:
		if r := a.lookup(p.Stdin.GetCommandId()); r != nil && r.proc != nil {
			a.stdinChunk(r, p.Stdin)
		}
	case *sandboxv1.ConnectResponse_PtyControl:
		a.ptyControl(p.PtyControl)
	case *sandboxv1.ConnectResponse_Ping:
		a.queueControl(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Pong{Pong: &sandboxv1.Pong{Nonce: p.Ping.GetNonce()}}})
	case *sandboxv1.ConnectResponse_ConfigUpdate:
		if s := p.ConfigUpdate.GetHeartbeatIntervalSeconds(); s > 0 {
			a.heartbeat.Store(int64(time.Duration(s) * time.Second))
		}
	case *sandboxv1.ConnectResponse_Shutdown:
		a.log.Info("management server asked this agent to shut down", "reason", p.Shutdown.GetReason())
		if a.cfg.OnShutdown != nil {
			go a.cfg.OnShutdown(p.Shutdown.GetReason())
		}
	case *sandboxv1.ConnectResponse_SessionQuery:
		a.out.pushNow(a.sessionReport(p.SessionQuery.GetRequestId()))
	case *sandboxv1.ConnectResponse_FileRequest:
		go a.transfer(ctx, p.FileRequest)
	case *sandboxv1.ConnectResponse_PermissionDecision:
		a.perms.deliver(p.PermissionDecision)
	case *sandboxv1.ConnectResponse_PortDial:
		go a.forwardPort(ctx, p.PortDial)
	case *sandboxv1.ConnectResponse_OutputAck:
		a.out.ack(p.OutputAck.GetCommandId(), p.OutputAck.GetStream(), p.OutputAck.GetOffset())
	}
}

func (a *Agent) ptyControl(c *sandboxv1.PtyControl) {
	r := a.lookup(c.GetCommandId())
	if r == nil {
		return
	}
	var err error
	switch act := c.GetAction().(type) {
	case *sandboxv1.PtyControl_Resize:
		err = r.proc.Resize(uint16(min(act.Resize.GetCols(), 0xffff)), uint16(min(act.Resize.GetRows(), 0xffff)))
	case *sandboxv1.PtyControl_Signal:
		err = r.proc.Signal(int(act.Signal.GetSignal()))
	case *sandboxv1.PtyControl_Kill:
		r.proc.Kill()
	}
	if err != nil {
		a.log.Debug("control failed", "command_id", r.id, "err", err)
	}
}

func (a *Agent) lookup(id string) *running {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running[id]
}

// running is a command the agent runs.
type running struct {
	id   string
	proc ports.Process
	// The session the command is, if any: reported on every connect.
	sessionID, sessionName string
	sessionType            ports.SessionType
	startedAt              time.Time
	// offsets per stream, and the tail of the main stream (the PTY, else
	// stdout), touched only from the serialised output callback.
	offsets map[ports.OutputStream]uint64
	tail    []byte
	// stdin is the command's input queue, made on its first input.
	stdinOnce sync.Once
	stdin     *stdinQueue
	// span is the agent's span of a command the server traced (nil when
	// it did not: no traceparent, no spans).
	span *spanwire.AgentSpan
}

// finished is a command that ended recently. Its result and output tail go
// into every connect report, because the messages carrying them may have
// been written into a connection that died.
type finished struct {
	info *sandboxv1.SessionInfo
	at   time.Time
}

// Bounds of what the agent remembers of finished commands.
const (
	finishedTailBytes = 4096
	finishedKeep      = 256
	finishedFor       = 15 * time.Minute
)

func (a *Agent) startCommand(req *sandboxv1.CommandRequest) {
	// The per-hop timeline of the exec path (AGENTIC_HOP_TRACE) starts
	// with the first command; unset, nothing is started.
	hopTraceOnce.Do(func() { hopenv.Start(os.Environ(), "agentic-agent") })
	hoptrace.Mark("agent.cmd_read")
	id := req.GetCommandId()
	a.mu.Lock()
	if _, dup := a.running[id]; dup || id == "" {
		a.mu.Unlock()
		return
	}
	spec := agentwire.CommandSpec(req)
	r := &running{id: id, offsets: map[ports.OutputStream]uint64{}, startedAt: time.Now(),
		sessionID: spec.SessionID, sessionName: spec.SessionName, sessionType: spec.SessionType,
		span: spanwire.StartRemote(req.GetTraceparent(), "agentd.Command", time.Now())}
	r.span.SetAttr("agentic.command_id", id)
	r.span.SetAttr("agentic.agent_id", a.ident.Load().ID)
	a.running[id] = r
	a.mu.Unlock()

	if spec.Command == "" && !(spec.Persist && a.tmux) {
		// A terminal without a command is the agent's shell (tmux starts it itself).
		cmd := sessionCommand(spec)
		spec.Command, spec.Args = cmd[0], cmd[1:]
	}
	if a.cfg.EgressListen != "" {
		// The command's own values win: it may mean to go direct (NO_PROXY).
		env := EgressEnv(a.cfg.EgressListen)
		for k, v := range spec.Env {
			env[k] = v
		}
		spec.Env = env
	}
	if len(spec.InjectEndpoints) > 0 {
		// Injected secrets: the base-URL variables name this agent's
		// endpoint (the server's word wins over the command's own).
		urls, err := a.injectURLs(spec.InjectEndpoints)
		if err != nil {
			a.log.Warn("no endpoint for injected secrets", "command_id", id, "err", err)
		}
		env := maps.Clone(spec.Env)
		if env == nil {
			env = map[string]string{}
		}
		maps.Copy(env, urls)
		spec.Env = env
	}
	if me := a.ident.Load(); me.ID != a.cfg.AgentID {
		// Renamed (a pool member taken): the agent's own environment still
		// names the id it started with.
		env := maps.Clone(spec.Env)
		if env == nil {
			env = map[string]string{}
		}
		env["AGENT_ID"] = me.ID
		spec.Env = env
	}
	var stop func() // the permission socket's, when the command has one
	if spec.PermissionPrompts {
		path, stopSocket, err := a.permissionSocket(id)
		if err != nil {
			a.log.Warn("no permission socket for a command that asked for one", "command_id", id, "err", err)
		} else {
			stop = stopSocket
			env := map[string]string{EnvPermissionSocket: path, EnvMCPConfig: ports.ClaudePermissionMCPConfig}
			if exe, err := os.Executable(); err == nil {
				env[EnvAgentExe] = exe
			}
			for k, v := range spec.Env {
				env[k] = v
			}
			spec.Env = env
		}
	}
	a.run(r, spec, nil)
	a.mu.Lock()
	proc := r.proc
	a.mu.Unlock()
	if stop == nil {
		return // nothing to wait for (a goroutine fewer per command)
	}
	if proc == nil {
		stop()
		return
	}
	go func() { <-proc.Done(); stop() }()
}

// run starts r's process (or, with found, takes over a tmux session an
// earlier agent process ran) and reports its output and end.
func (a *Agent) run(r *running, spec ports.CommandSpec, found *foundSession) {
	id := r.id
	mainStream := ports.StreamStdout
	if spec.PTY || found != nil {
		mainStream = ports.StreamPTY
	}
	onOutput := func(stream ports.OutputStream, data []byte) {
		off := r.offsets[stream]
		r.offsets[stream] = off + uint64(len(data))
		if stream == mainStream {
			r.tail = append(r.tail, data...)
			if len(r.tail) > finishedTailBytes {
				r.tail = append(r.tail[:0], r.tail[len(r.tail)-finishedTailBytes:]...)
			}
		}
		a.out.push(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Output{Output: &sandboxv1.OutputChunk{
			StreamId: id, Stream: agentwire.StreamToProto(stream), Data: data, Timestamp: timestamppb.Now(), Offset: off,
		}}})
	}
	procSpan := r.span.Child("agentd.Process", time.Now())
	var proc ports.Process
	switch {
	case found != nil && found.logFile != "":
		proc = followTmuxLog(*found, onOutput)
	case found != nil:
		proc = attachTmuxSession(a.cfg.Runner, *found, onOutput)
	case spec.Persist && spec.PTY && spec.SessionName != "" && a.tmux && spec.SessionType == ports.SessionBackground:
		proc = startTmuxLog(spec, onOutput)
	case spec.Persist && spec.PTY && spec.SessionName != "" && a.tmux:
		proc = startTmuxSession(a.cfg.Runner, spec, onOutput)
	default:
		proc = a.cfg.Runner.Start(spec, onOutput)
	}
	// Set under the lock: Shutdown reads it from another goroutine. A
	// Shutdown that began meanwhile could not kill it, so kill it here.
	a.mu.Lock()
	r.proc = proc
	stop := a.draining.Load()
	a.mu.Unlock()
	if stop {
		proc.Kill()
	}
	hoptrace.Mark("agent.proc_started")
	var held *heldStart
	if pid := proc.Pid(); pid > 0 {
		procSpan.SetAttr("process.pid", strconv.Itoa(pid))
		started := &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_CommandStarted{CommandStarted: &sandboxv1.CommandStarted{
			CommandId: id, Pid: int32(pid), StartedAt: timestamppb.Now(), //nolint:gosec // Linux pids fit in int32
		}}}
		if r.sessionID != "" || found != nil {
			// A session's or a mission's start is what the server waits
			// for (OnStarted marks it running): at once.
			a.out.pushNow(started)
		} else {
			held = a.holdStart(started)
		}
	}
	go func() {
		res := proc.Wait()
		hoptrace.Mark("agent.proc_waited")
		held.cancel() // before anything of the end is queued
		if t, ok := proc.(interface{ isDetached() bool }); ok && t.isDetached() {
			// The session lives on in tmux for the next agent process,
			// which adopts it: no result, nothing to remember.
			a.mu.Lock()
			delete(a.running, id)
			a.mu.Unlock()
			a.idle.Broadcast()
			return
		}
		for stream, off := range r.offsets {
			a.out.push(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Output{Output: &sandboxv1.OutputChunk{
				StreamId: id, Stream: agentwire.StreamToProto(stream), Timestamp: timestamppb.Now(), Offset: off, Eof: true,
			}}})
		}
		result := agentwire.CommandResult(id, res)
		if r.span != nil {
			// The spans go before the result: the server takes them while
			// the command is its.
			now := time.Now()
			procSpan.End(now, res.Error)
			r.span.SetAttr("agentic.exit_code", strconv.Itoa(res.ExitCode))
			r.span.End(now, res.Error)
			a.out.push(agentwire.SpanReport(finishedSpans(r.span, procSpan)))
		}
		a.out.push(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_CommandResult{CommandResult: result}})
		hoptrace.Mark("agent.result_queued")
		// Output callbacks are over once Wait returned: r.tail is final.
		info := &sandboxv1.SessionInfo{
			CommandId: id, State: sandboxv1.SessionState_SESSION_STATE_EXITED, ExitCode: int32(res.ExitCode), //nolint:gosec // exit codes are 0-255 or 128+signal
			Result: result, OutputTail: r.tail, TailStream: agentwire.StreamToProto(mainStream), OutputOffset: r.offsets[mainStream],
		}
		a.mu.Lock()
		delete(a.running, id)
		a.rememberFinished(id, info, time.Now())
		a.mu.Unlock()
		a.idle.Broadcast()
	}()
}

// startedHold is how long a plain command (not a session's or a mission's)
// must run before its CommandStarted goes out. The server does nothing with
// the start of such a command (no OnStarted: the result says it started),
// and sent at once it crossed the link and woke agentic-mgmt while the
// child was still exec'ing on a 2-core machine: REST exec `true` was 3-5 %
// slower with it (benchrun -before, 40 rounds each way). A longer command
// still reports its start, while it runs. Atomic: tests change it.
var startedHold atomic.Int64

func init() { startedHold.Store(int64(10 * time.Millisecond)) }

// heldStart is a CommandStarted waiting out startedHold: it goes out then
// unless the command ended first, and never after its result.
type heldStart struct {
	mu    sync.Mutex
	over  bool // sent, or the command ended
	timer *time.Timer
}

func (a *Agent) holdStart(m *sandboxv1.ConnectRequest) *heldStart {
	h := &heldStart{}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.timer = time.AfterFunc(time.Duration(startedHold.Load()), func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.over {
			h.over = true
			a.out.pushNow(m)
		}
	})
	return h
}

// cancel drops the start if it is still held; one being sent is queued
// before cancel returns, so ahead of the result.
func (h *heldStart) cancel() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.over = true
	h.mu.Unlock()
	h.timer.Stop()
}

// rememberFinished keeps a finished command for the connect reports, within
// the bounds; a.mu must be held.
func (a *Agent) rememberFinished(id string, info *sandboxv1.SessionInfo, now time.Time) {
	a.finished[id] = finished{info: info, at: now}
	if len(a.finished) <= finishedKeep {
		return
	}
	var oldestID string
	var oldest time.Time
	for fid, f := range a.finished {
		if now.Sub(f.at) > finishedFor {
			delete(a.finished, fid)
			continue
		}
		if oldestID == "" || f.at.Before(oldest) {
			oldestID, oldest = fid, f.at
		}
	}
	if len(a.finished) > finishedKeep {
		delete(a.finished, oldestID)
	}
}

func (a *Agent) sessionReport(requestID string) *sandboxv1.ConnectRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	rep := &sandboxv1.SessionReport{RequestId: requestID}
	for _, r := range a.running {
		si := &sandboxv1.SessionInfo{CommandId: r.id, State: sandboxv1.SessionState_SESSION_STATE_RUNNING,
			SessionId: r.sessionID, Name: r.sessionName, Type: agentwire.SessionTypeToProto(r.sessionType), StartedAt: timestamppb.New(r.startedAt)}
		if r.proc != nil {
			si.Pid = int32(r.proc.Pid()) //nolint:gosec // Linux pids fit in int32
		}
		rep.Sessions = append(rep.Sessions, si)
	}
	for _, f := range a.finished {
		if time.Since(f.at) <= finishedFor {
			rep.Sessions = append(rep.Sessions, f.info)
		}
	}
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_SessionReport{SessionReport: rep}}
}

// finishedSpans are the spans of spans that ended.
func finishedSpans(spans ...*spanwire.AgentSpan) []spanwire.RemoteSpan {
	var out []spanwire.RemoteSpan
	for _, s := range spans {
		if f, ok := s.Finished(); ok {
			out = append(out, f)
		}
	}
	return out
}
