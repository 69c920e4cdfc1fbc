package agentd

import (
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func TestNewValidatesConfig(t *testing.T) {
	ok := testConfig("http://127.0.0.1:1", newFakeRunner())
	for _, tc := range []struct {
		name  string
		tweak func(*Config)
	}{
		{"no id", func(c *Config) { c.AgentID = "" }},
		{"no secret", func(c *Config) { c.Secret = "" }},
		{"no server", func(c *Config) { c.ServerURL = "" }},
		{"ftp server", func(c *Config) { c.ServerURL = "ftp://example.com" }},
		{"grpc scheme", func(c *Config) { c.ServerURL = "grpc://example.com:8120" }},
		{"no scheme", func(c *Config) { c.ServerURL = "example.com:8120" }},
		{"no host", func(c *Config) { c.ServerURL = "http://" }},
		{"unparsable", func(c *Config) { c.ServerURL = "http://[::1" }},
		{"no runner", func(c *Config) { c.Runner = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.tweak(&cfg)
			if a, err := New(cfg); err == nil {
				t.Fatalf("New accepted %+v: %v", cfg, a)
			}
		})
	}

	for _, u := range []string{"http://127.0.0.1:8120", "https://mgmt.example.com", "http://[::1]:8120/"} {
		cfg := ok
		cfg.ServerURL = u
		if _, err := New(cfg); err != nil {
			t.Errorf("New rejected %s: %v", u, err)
		}
	}

	// Defaults.
	cfg := ok
	cfg.BackoffMin, cfg.BackoffMax, cfg.OutboxBytes, cfg.Logger = 0, 0, 0, nil
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a.cfg.BackoffMin != 5*time.Second || a.cfg.BackoffMax != time.Minute || a.cfg.OutboxBytes != 64<<20 || a.cfg.Logger == nil {
		t.Fatalf("defaults: %+v", a.cfg)
	}
	if a.Connected() {
		t.Fatal("connected before Run")
	}
}

func TestRegistersThenHeartbeats(t *testing.T) {
	cp, _, a, s := connectedAgent(t)

	if got := s.header.Get("x-agent-id"); got != testAgentID {
		t.Errorf("x-agent-id = %q", got)
	}
	if got := s.header.Get("x-agent-secret"); got != testSecret {
		t.Errorf("x-agent-secret = %q", got)
	}
	host, _ := os.Hostname()
	reg := s.reg
	if reg.GetAgentId() != testAgentID || reg.GetHostname() != host || reg.GetRuntime() != sandboxv1.RuntimeKind_RUNTIME_KIND_CONTAINER ||
		reg.GetAgentVersion() != "9.9.9" || !reflect.DeepEqual(reg.GetLabels(), map[string]string{"zone": "a"}) || reg.GetIpAddress() == "" {
		t.Errorf("registration %v", reg)
	}
	si := reg.GetSystemInfo()
	if si.GetOs() != runtime.GOOS || si.GetArch() != runtime.GOARCH || si.GetCpuCores() != uint32(runtime.NumCPU()) ||
		si.GetMemoryBytes() == 0 || si.GetKernel() == "" || si.GetDiskBytes() == 0 {
		t.Errorf("system info %v", si)
	}

	hb := s.recv(t).GetHeartbeat()
	if hb == nil {
		t.Fatal("the first message after the registration is not a heartbeat")
	}
	m := hb.GetMetrics()
	if hb.GetStatus() != sandboxv1.AgentStatus_AGENT_STATUS_READY || hb.GetRunningCommands() != 0 || hb.GetSentAt() == nil ||
		m.GetMemoryTotalBytes() == 0 || m.GetMemoryUsedBytes() > m.GetMemoryTotalBytes() || m.GetDiskTotalBytes() == 0 ||
		m.GetDiskUsedBytes() > m.GetDiskTotalBytes() || m.GetCpuPercent() < 0 || m.GetCpuPercent() > 100 {
		t.Errorf("heartbeat %v", hb)
	}
	// Then the connect report, naming this connection and no commands.
	rep := s.recv(t).GetSessionReport()
	if rep.GetRequestId() != "connect:"+s.connID || len(rep.GetSessions()) != 0 {
		t.Errorf("connect report %v, want connect:%s with no sessions", rep, s.connID)
	}
	if !a.Connected() {
		t.Error("Connected() false while registered")
	}
	if got := time.Duration(a.heartbeat.Load()); got != 5*time.Second {
		t.Errorf("heartbeat interval %v, want the 5 s of the ack", got)
	}
	if len(cp.attemptTimes()) != 1 {
		t.Errorf("%d connection attempts, want 1", len(cp.attemptTimes()))
	}
}

// The heartbeat loop waits the interval the ack named (not the default
// 5 s), then one a config update names. The test holds the loop's timer:
// it sees each wait asked for and fires it, so no interval is timed.
func TestHeartbeatIntervalFromAck(t *testing.T) {
	t.Parallel()
	cp, url := startCP(t)
	cp.hbSecs = 7
	a, err := New(testConfig(url, newFakeRunner()))
	if err != nil {
		t.Fatal(err)
	}
	waits, fire := make(chan time.Duration, 16), make(chan time.Time)
	a.heartbeatAfter = func(d time.Duration) <-chan time.Time { waits <- d; return fire }
	runBuilt(t, a)
	s := cp.nextSession(t)
	if s.recv(t).GetHeartbeat() == nil {
		t.Fatal("no heartbeat on connecting")
	}
	asked := func(want time.Duration) {
		t.Helper()
		if d := within(t, waits, "the heartbeat loop set no timer"); d != want {
			t.Fatalf("the heartbeat loop waits %v, want %v", d, want)
		}
	}
	beat := func() {
		t.Helper()
		select {
		case fire <- time.Now():
		case <-time.After(waitTimeout):
			t.Fatal("the heartbeat loop does not wait on its timer")
		}
		for s.recv(t).GetHeartbeat() == nil {
		}
	}
	asked(7 * time.Second)
	beat()
	asked(7 * time.Second)
	s.send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_ConfigUpdate{ConfigUpdate: &sandboxv1.ConfigUpdate{HeartbeatIntervalSeconds: 2}}})
	eventually(t, "the config update taken", func() bool { return time.Duration(a.heartbeat.Load()) == 2*time.Second })
	beat()
	asked(2 * time.Second)
}

func TestCommandLifecycle(t *testing.T) {
	_, r, a, s := connectedAgent(t)

	req := &sandboxv1.CommandRequest{
		CommandId: "cmd-1", Command: "bash", Args: []string{"-c", "cat"}, WorkingDir: "/tmp",
		Env: map[string]string{"FOO": "bar"}, TimeoutSeconds: 30, RunAs: "nobody",
		AllocatePty: true, PtyCols: 120, PtyRows: 40, PtyTerm: "xterm", StdinOpen: true,
		SessionId: "sess-1", SessionName: "main",
	}
	p := startCommand(t, s, r, req)
	want := ports.CommandSpec{
		Command: "bash", Args: []string{"-c", "cat"}, WorkingDir: "/tmp", Env: map[string]string{"FOO": "bar"},
		Timeout: 30 * time.Second, RunAs: "nobody", PTY: true, Cols: 120, Rows: 40, Term: "xterm",
		StdinOpen: true, SessionID: "sess-1", SessionName: "main",
	}
	if !reflect.DeepEqual(p.spec, want) {
		t.Fatalf("runner got %+v\nwant %+v", p.spec, want)
	}
	if hb := a.heartbeatMessage().GetHeartbeat(); hb.GetStatus() != sandboxv1.AgentStatus_AGENT_STATUS_BUSY || hb.GetRunningCommands() != 1 {
		t.Errorf("heartbeat while running: %v", hb)
	}

	// A resent request for a running command, and one without id, start nothing.
	s.send(commandMsg(req))
	s.send(commandMsg(&sandboxv1.CommandRequest{Command: "x"}))
	// Control for unknown commands is ignored.
	s.send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Stdin{Stdin: &sandboxv1.StdinChunk{CommandId: "nope", Data: []byte("x")}}})
	s.send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_PtyControl{PtyControl: &sandboxv1.PtyControl{CommandId: "nope",
		Action: &sandboxv1.PtyControl_Kill{Kill: &sandboxv1.CommandKill{}}}}})

	p.emit(ports.StreamStdout, "ab")
	p.emit(ports.StreamStdout, "cde")
	p.emit(ports.StreamStderr, "x")
	p.emit(ports.StreamPTY, "tty")
	for i, w := range []outMsg{
		{pbStdout, "ab", 0, false},
		{pbStdout, "cde", 2, false},
		{pbStderr, "x", 0, false},
		{pbPTY, "tty", 0, false},
	} {
		if got := outputOf(t, s.next(t), "cmd-1"); got != w {
			t.Fatalf("chunk %d: %+v, want %+v", i, got, w)
		}
	}

	// Stdin, resize, signal and kill reach the process, in order.
	for _, m := range []*sandboxv1.ConnectResponse{
		{Payload: &sandboxv1.ConnectResponse_Stdin{Stdin: &sandboxv1.StdinChunk{CommandId: "cmd-1", Data: []byte("hello")}}},
		{Payload: &sandboxv1.ConnectResponse_Stdin{Stdin: &sandboxv1.StdinChunk{CommandId: "cmd-1", Data: []byte("bye"), Eof: true}}},
		{Payload: &sandboxv1.ConnectResponse_PtyControl{PtyControl: &sandboxv1.PtyControl{CommandId: "cmd-1",
			Action: &sandboxv1.PtyControl_Resize{Resize: &sandboxv1.PtyResize{Cols: 100, Rows: 50}}}}},
		{Payload: &sandboxv1.ConnectResponse_PtyControl{PtyControl: &sandboxv1.PtyControl{CommandId: "cmd-1",
			Action: &sandboxv1.PtyControl_Resize{Resize: &sandboxv1.PtyResize{Cols: 70000, Rows: 1}}}}},
		{Payload: &sandboxv1.ConnectResponse_PtyControl{PtyControl: &sandboxv1.PtyControl{CommandId: "cmd-1",
			Action: &sandboxv1.PtyControl_Signal{Signal: &sandboxv1.PtySignal{Signal: 2}}}}},
		{Payload: &sandboxv1.ConnectResponse_Stdin{Stdin: &sandboxv1.StdinChunk{CommandId: "cmd-1", Eof: true}}},
	} {
		s.send(m)
	}
	p.exitOnKill.Store(false)
	s.send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_PtyControl{PtyControl: &sandboxv1.PtyControl{CommandId: "cmd-1",
		Action: &sandboxv1.PtyControl_Kill{Kill: &sandboxv1.CommandKill{Reason: "test"}}}}})
	// Input keeps its order (and ends once); controls keep theirs. Input
	// has its own writer, so it need not come before controls sent later.
	var input, controls []string
	for range 7 {
		switch e := p.event(t); {
		case strings.HasPrefix(e, "stdin:") || e == "eof":
			input = append(input, e)
		default:
			controls = append(controls, e)
		}
	}
	if !slices.Equal(input, []string{"stdin:hello", "stdin:bye", "eof"}) || !slices.Equal(controls, []string{"resize:100x50", "resize:65535x1", "signal:2", "kill"}) {
		t.Fatalf("process saw input %q and controls %q", input, controls)
	}
	select {
	case <-r.started:
		t.Fatal("a duplicate or id-less request started a process")
	default:
	}

	p.exit(ports.CommandResult{ExitCode: 137, Signal: 9, Duration: 1234 * time.Millisecond})
	var eofs []outMsg
	for range 3 {
		eofs = append(eofs, outputOf(t, s.next(t), "cmd-1"))
	}
	slices.SortFunc(eofs, func(x, y outMsg) int { return int(x.stream) - int(y.stream) })
	if wantEOF := []outMsg{{pbStdout, "", 5, true}, {pbStderr, "", 1, true}, {pbPTY, "", 3, true}}; !reflect.DeepEqual(eofs, wantEOF) {
		t.Fatalf("EOF chunks %+v, want %+v", eofs, wantEOF)
	}
	res := s.next(t).GetCommandResult()
	if !proto.Equal(res, &sandboxv1.CommandResult{CommandId: "cmd-1", ExitCode: 137, Signal: 9, DurationMs: 1234}) {
		t.Fatalf("result %v", res)
	}
	eventually(t, "command forgotten", func() bool { return a.lookup("cmd-1") == nil })
	if hb := a.heartbeatMessage().GetHeartbeat(); hb.GetStatus() != sandboxv1.AgentStatus_AGENT_STATUS_READY || hb.GetRunningCommands() != 0 {
		t.Errorf("heartbeat after the command: %v", hb)
	}
}

func TestFailedStartReportsResult(t *testing.T) {
	_, r, _, s := connectedAgent(t)
	// A process that could not start (pid 0) is not reported as started.
	r.failStart.Store(true)
	s.send(commandMsg(&sandboxv1.CommandRequest{CommandId: "c", Command: "missing"}))
	p := r.next(t)
	p.exit(ports.CommandResult{ExitCode: 127, Error: "executable file not found"})
	r.failStart.Store(false)
	res := s.next(t).GetCommandResult()
	if !proto.Equal(res, &sandboxv1.CommandResult{CommandId: "c", ExitCode: 127, Error: "executable file not found"}) {
		t.Fatalf("result %v", res)
	}
	// A successful one says so.
	p = startCommand(t, s, r, &sandboxv1.CommandRequest{CommandId: "d", Command: "true"})
	p.exit(ports.CommandResult{Duration: 3 * time.Millisecond})
	if res := s.next(t).GetCommandResult(); !res.GetSuccess() || res.GetCommandId() != "d" || res.GetDurationMs() != 3 {
		t.Fatalf("result %v", res)
	}
}

func TestOutputSurvivesReconnect(t *testing.T) {
	cp, r, a, s1 := connectedAgent(t)
	p := startCommand(t, s1, r, &sandboxv1.CommandRequest{CommandId: "cmd-1", Command: "x"})
	p.emit(ports.StreamStdout, "one ")
	if got := outputOf(t, s1.next(t), "cmd-1"); got != (outMsg{pbStdout, "one ", 0, false}) {
		t.Fatalf("before the drop: %+v", got)
	}

	// The server goes away and refuses the agent for a while.
	cp.setRefuse(connect.CodeUnavailable)
	attempts := len(cp.attemptTimes())
	s1.dropStream(t)
	eventually(t, "agent notices the drop", func() bool { return !a.Connected() })

	// The process keeps producing output while the agent is away.
	p.emit(ports.StreamStdout, "two ")
	eventually(t, "a refused reconnect attempt", func() bool { return len(cp.attemptTimes()) > attempts })
	p.emit(ports.StreamStderr, "oops")
	p.emit(ports.StreamStdout, "three")
	p.exit(ports.CommandResult{ExitCode: 4})
	// 3 chunks, 2 EOFs and the result wait in the outbox.
	eventually(t, "result queued", func() bool { return a.out.len() == 6 })

	cp.setRefuse(0)
	s2 := cp.nextSession(t)
	for i, w := range []outMsg{
		{pbStdout, "two ", 4, false},
		{pbStderr, "oops", 0, false},
		{pbStdout, "three", 8, false},
	} {
		if got := outputOf(t, s2.nextAny(t), "cmd-1"); got != w {
			t.Fatalf("after reconnect, chunk %d: %+v, want %+v", i, got, w)
		}
	}
	eofs := []outMsg{outputOf(t, s2.nextAny(t), "cmd-1"), outputOf(t, s2.nextAny(t), "cmd-1")}
	slices.SortFunc(eofs, func(x, y outMsg) int { return int(x.stream) - int(y.stream) })
	if want := []outMsg{{pbStdout, "", 13, true}, {pbStderr, "", 4, true}}; !reflect.DeepEqual(eofs, want) {
		t.Fatalf("EOFs %+v, want %+v", eofs, want)
	}
	if res := s2.nextAny(t).GetCommandResult(); res.GetCommandId() != "cmd-1" || res.GetExitCode() != 4 {
		t.Fatalf("result %v", res)
	}
	// The connect report comes behind everything held and lists the command
	// as exited, with its result and the tail of its main stream, in case
	// the messages above were written into a connection that died.
	rep := s2.nextAny(t).GetSessionReport()
	if rep.GetRequestId() != "connect:"+s2.connID || len(rep.GetSessions()) != 1 {
		t.Fatalf("connect report %v", rep)
	}
	if si := rep.GetSessions()[0]; si.GetState() != sandboxv1.SessionState_SESSION_STATE_EXITED || si.GetResult().GetExitCode() != 4 ||
		string(si.GetOutputTail()) != "one two three" || si.GetOutputOffset() != 13 || si.GetTailStream() != pbStdout {
		t.Fatalf("finished command in the report: %v", si)
	}
	if m := s2.pendingNonHeartbeat(); m != nil {
		t.Fatalf("unexpected %v", m)
	}
	// A message leaves the outbox once its send returned, which may be
	// after the server has it.
	eventually(t, "the outbox empty", func() bool { return a.out.len() == 0 })
}

// A drained stream: the agent stops sending on it and closes its side, so
// the server reads everything it sent; what it had not sent yet goes on
// the next connection. Output written all along arrives whole and once.
func TestDrainedStreamLosesNothing(t *testing.T) {
	cp, url := startCP(t)
	r := newFakeRunner()
	cfg := testConfig(url, r)
	// A drained agent connects again at once, not after its backoff.
	cfg.BackoffMin, cfg.BackoffMax = time.Hour, time.Hour
	runAgent(t, cfg)
	s1 := cp.nextSession(t)
	p := startCommand(t, s1, r, &sandboxv1.CommandRequest{CommandId: "cmd-1", Command: "x"})
	var want strings.Builder
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		for i := range 2000 {
			line := fmt.Sprintf("line-%d\n", i)
			p.emit(ports.StreamStdout, line)
			want.WriteString(line)
		}
	}()
	s1.send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Drain{Drain: &sandboxv1.Drain{Reason: "restart"}}})
	within(t, s1.inDone, "the agent did not close its side of the drained stream")
	<-wrote
	p.exit(ports.CommandResult{})
	var got strings.Builder
	collect := func(s *cpSession, untilResult bool) {
		for {
			var m *sandboxv1.ConnectRequest
			if untilResult {
				m = s.next(t)
			} else if m = s.pendingNonHeartbeat(); m == nil {
				return
			}
			if res := m.GetCommandResult(); res != nil {
				return
			}
			if o := m.GetOutput(); o != nil && len(o.GetData()) > 0 {
				if o.GetOffset() != uint64(got.Len()) {
					t.Fatalf("chunk at offset %d after %d bytes: lost or repeated output", o.GetOffset(), got.Len())
				}
				got.Write(o.GetData())
			}
		}
	}
	collect(s1, false)
	s2 := cp.nextSession(t)
	collect(s2, true)
	if got.String() != want.String() {
		t.Fatalf("got %d bytes, want %d", got.Len(), want.Len())
	}
}

func TestRefusedAgentRetriesWithGrowingBackoff(t *testing.T) {
	cp, url := startCP(t)
	cp.setRefuse(connect.CodeUnauthenticated)
	cfg := testConfig(url, newFakeRunner())
	cfg.BackoffMin, cfg.BackoffMax = 30*time.Millisecond, 240*time.Millisecond
	log := &retryLog{}
	cfg.Logger = slog.New(log)
	a := runAgent(t, cfg)

	// Waits: 30, 60, 120, 240, 240 ms, each ±10% jitter. The agent logs
	// the wait it chose; the attempts are at least that far apart (a
	// loaded machine only stretches the gaps, so they are not timed).
	eventually(t, "six attempts", func() bool { return len(cp.attemptTimes()) >= 6 })
	at, waits := cp.attemptTimes(), log.retries()
	for i, want := range []time.Duration{30, 60, 120, 240, 240} {
		want *= time.Millisecond
		if w := waits[i]; w < want*9/10 || w > want*11/10 {
			t.Errorf("wait %d = %v, want %v ±10%%: the backoff does not start at the minimum, double and stop at the maximum (waits %v)", i, w, want, waits)
		}
		if gap := at[i+1].Sub(at[i]); gap < waits[i] {
			t.Errorf("attempts %d and %d only %v apart, less than the %v wait", i, i+1, gap, waits[i])
		}
	}
	if a.Connected() {
		t.Fatal("connected while refused")
	}
	for _, h := range cp.headers {
		if h.Get("x-agent-id") != testAgentID || h.Get("x-agent-secret") != testSecret {
			t.Fatalf("attempt headers %v", h)
		}
	}

	// Once accepted the agent registers; a later drop reconnects after the
	// minimum backoff again, not the grown one.
	cp.setRefuse(0)
	s := cp.nextSession(t)
	n := len(log.retries())
	s.dropStream(t)
	s2 := cp.nextSession(t)
	if w := log.retries()[n]; w > 33*time.Millisecond {
		t.Errorf("reconnect after a registered session waited %v, want the 30 ms minimum ±10%%", w)
	}
	if s2.reg.GetAgentId() != testAgentID {
		t.Fatal(s2.reg)
	}
}

func TestRegistrationNotAcceptedIsRetried(t *testing.T) {
	cp, url := startCP(t)
	cp.mu.Lock()
	cp.notAck = true
	cp.mu.Unlock()
	cfg := testConfig(url, newFakeRunner())
	cfg.BackoffMin = 10 * time.Millisecond
	a := runAgent(t, cfg)
	eventually(t, "three attempts", func() bool { return len(cp.attemptTimes()) >= 3 })
	if a.Connected() {
		t.Fatal("connected without acceptance")
	}
	cp.mu.Lock()
	cp.notAck = false
	cp.mu.Unlock()
	cp.nextSession(t)
	eventually(t, "connected", a.Connected)
}

func TestPingAndSessionQuery(t *testing.T) {
	_, r, _, s := connectedAgent(t)

	s.send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Ping{Ping: &sandboxv1.Ping{Nonce: 42}}})
	if pong := s.next(t).GetPong(); pong.GetNonce() != 42 {
		t.Fatalf("pong %v", pong)
	}

	s.send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_SessionQuery{SessionQuery: &sandboxv1.SessionQuery{RequestId: "q0"}}})
	if rep := s.next(t).GetSessionReport(); rep.GetRequestId() != "q0" || len(rep.GetSessions()) != 0 {
		t.Fatalf("report with nothing running: %v", rep)
	}

	p1 := startCommand(t, s, r, &sandboxv1.CommandRequest{CommandId: "c1", Command: "x"})
	p2 := startCommand(t, s, r, &sandboxv1.CommandRequest{CommandId: "c2", Command: "y"})
	s.send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_SessionQuery{SessionQuery: &sandboxv1.SessionQuery{RequestId: "q1"}}})
	rep := s.next(t).GetSessionReport()
	if rep.GetRequestId() != "q1" {
		t.Fatalf("report %v", rep)
	}
	got := map[string]int32{}
	for _, si := range rep.GetSessions() {
		if si.GetState() != sandboxv1.SessionState_SESSION_STATE_RUNNING {
			t.Errorf("session %v not running", si)
		}
		got[si.GetCommandId()] = si.GetPid()
	}
	if want := map[string]int32{"c1": int32(p1.pid), "c2": int32(p2.pid)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("report lists %v, want %v", got, want)
	}
	p1.exit(ports.CommandResult{})
	p2.exit(ports.CommandResult{})
}

func TestServerMessagesShutdownAndConfig(t *testing.T) {
	cp, url := startCP(t)
	cfg := testConfig(url, newFakeRunner())
	reasons := make(chan string, 1)
	cfg.OnShutdown = func(reason string) { reasons <- reason }
	a := runAgent(t, cfg)
	s := cp.nextSession(t)

	s.send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_ConfigUpdate{ConfigUpdate: &sandboxv1.ConfigUpdate{HeartbeatIntervalSeconds: 2}}})
	s.send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_ConfigUpdate{ConfigUpdate: &sandboxv1.ConfigUpdate{}}}) // 0: unchanged
	s.send(&sandboxv1.ConnectResponse{Payload: &sandboxv1.ConnectResponse_Shutdown{Shutdown: &sandboxv1.Shutdown{Reason: "maintenance"}}})
	if got := within(t, reasons, "OnShutdown not called"); got != "maintenance" {
		t.Fatalf("OnShutdown(%q)", got)
	}
	if got := time.Duration(a.heartbeat.Load()); got != 2*time.Second {
		t.Fatalf("heartbeat interval %v after config update", got)
	}
}

func TestShutdownKillsCommandsAndWaitsForResults(t *testing.T) {
	_, r, a, s := connectedAgent(t)
	p1 := startCommand(t, s, r, &sandboxv1.CommandRequest{CommandId: "c1", Command: "x"})
	p2 := startCommand(t, s, r, &sandboxv1.CommandRequest{CommandId: "c2", Command: "y"})

	// The timeout outlasts the test: only the results can end Shutdown.
	done := make(chan struct{})
	go func() { defer close(done); a.Shutdown(time.Hour) }()
	for _, p := range []*fakeProc{p1, p2} {
		if e := p.event(t); e != "kill" {
			t.Fatalf("process saw %q, want kill", e)
		}
	}
	within(t, done, "Shutdown did not return: it waits for its timeout instead of the results")
	if n := a.out.len(); n != 0 {
		t.Fatalf("Shutdown returned with %d messages unsent", n)
	}
	results := map[string]int32{}
	for len(results) < 2 {
		if res := s.next(t).GetCommandResult(); res != nil {
			results[res.GetCommandId()] = res.GetSignal()
		}
	}
	if want := map[string]int32{"c1": 15, "c2": 15}; !reflect.DeepEqual(results, want) {
		t.Fatalf("results %v", results)
	}
	if st := a.heartbeatMessage().GetHeartbeat().GetStatus(); st != sandboxv1.AgentStatus_AGENT_STATUS_DRAINING {
		t.Fatalf("status after Shutdown: %v", st)
	}
}

func TestShutdownGivesUpAfterTimeout(t *testing.T) {
	_, r, a, s := connectedAgent(t)
	p := startCommand(t, s, r, &sandboxv1.CommandRequest{CommandId: "c1", Command: "stubborn"})
	p.exitOnKill.Store(false)
	defer p.exit(ports.CommandResult{ExitCode: 137, Signal: 9})

	start := time.Now()
	done := make(chan time.Duration, 1)
	go func() { a.Shutdown(150 * time.Millisecond); done <- time.Since(start) }()
	// Its own timer holds Shutdown at least the timeout, however loaded
	// the machine; how much later it returns is the machine's business.
	if took := within(t, done, "Shutdown did not give up after its timeout"); took < 150*time.Millisecond {
		t.Fatalf("Shutdown returned after %v, before its 150 ms timeout", took)
	}
	if e := p.event(t); e != "kill" {
		t.Fatalf("process saw %q", e)
	}
}

func TestShutdownWithNothingRunningReturnsAtOnce(t *testing.T) {
	cp, url := startCP(t)
	a := runAgent(t, testConfig(url, newFakeRunner()))
	cp.nextSession(t)
	done := make(chan struct{})
	go func() { defer close(done); a.Shutdown(time.Hour) }()
	within(t, done, "Shutdown with nothing running waits for its timeout")
}

// Shutdown may come (SIGTERM) while a command request is being started: the
// command is already listed as running but its process is not known yet.
// Its process must still be stopped, and Shutdown return once it ended.
//
// BUG: Shutdown skips the command whose process is not set yet and nothing
// kills the process once Runner.Start returns, so Shutdown waits out its
// whole timeout and the process outlives the agent.
func TestShutdownWhileACommandStarts(t *testing.T) {
	cp, url := startCP(t)
	r := newFakeRunner()
	entered, release := make(chan struct{}), make(chan struct{})
	r.beforeStart = func(ports.CommandSpec) {
		close(entered)
		<-release
	}
	a := runAgent(t, testConfig(url, r))
	s := cp.nextSession(t)
	s.send(commandMsg(&sandboxv1.CommandRequest{CommandId: "c1", Command: "x"}))
	within(t, entered, "runner not called")

	// The timeout outlasts the test's waits: only the process's end can
	// end Shutdown in time.
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		a.Shutdown(time.Hour)
	}()
	eventually(t, "Shutdown started", a.draining.Load)
	close(release)
	p := r.next(t)
	select {
	case e := <-p.events:
		if e != "kill" {
			t.Errorf("process saw %q, want kill", e)
		}
	case <-time.After(waitTimeout):
		t.Errorf("the process that started during Shutdown was not killed")
		p.exit(ports.CommandResult{}) // let Shutdown finish
	}
	within(t, returned, "Shutdown did not return")
}

// unwedge is for when a test found the agent stuck on a full outbox: it
// keeps emptying the outbox for a while so Run can return at cleanup.
func unwedge(a *Agent) {
	stop := time.After(waitTimeout)
	for {
		select {
		case <-stop:
			return
		default:
		}
		for a.out.peek() != nil {
			a.out.pop()
		}
		time.Sleep(time.Millisecond)
	}
}

// fillWhileAway makes p produce n chunks of size bytes from a goroutine (it
// blocks when the outbox is full) and then exit; done closes after the exit.
func fillWhileAway(p *fakeProc, n, size int) (done chan struct{}) {
	done = make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			p.emit(ports.StreamStdout, strings.Repeat(string(rune('a'+i%26)), size))
		}
		p.exit(ports.CommandResult{ExitCode: 0})
	}()
	return done
}

// overFull reports whether the outbox holds more than its limit (one chunk
// bigger than the limit, accepted into the empty box), so every push blocks.
func overFull(a *Agent) bool {
	a.out.mu.Lock()
	defer a.out.mu.Unlock()
	return a.out.bytes > a.out.limit
}

// Output produced while the agent is away can fill the outbox; the producer
// then blocks. When the agent reconnects it must drain the backlog.
//
// BUG: serve pushes the connect report with the blocking outbox.push before
// the send loop runs; with a full outbox it waits for space only the send
// loop can make, so the agent registers and then never sends anything again
// (no output, no heartbeats) and Run cannot even be cancelled.
func TestFullOutboxDrainsAfterReconnect(t *testing.T) {
	cp, url := startCP(t)
	r, a, s1 := agentOn(t, cp, url, func(c *Config) { c.OutboxBytes = 1024 })
	p := startCommand(t, s1, r, &sandboxv1.CommandRequest{CommandId: "c1", Command: "chatty"})

	cp.setRefuse(connect.CodeUnavailable)
	s1.dropStream(t)
	eventually(t, "agent notices the drop", func() bool { return !a.Connected() })
	// Chunks bigger than the limit: each goes into the empty box alone.
	const n, size = 6, 1500
	produced := fillWhileAway(p, n, size)
	eventually(t, "outbox full", func() bool { return overFull(a) })

	cp.setRefuse(0)
	s2 := cp.nextSession(t)
	var got strings.Builder
	var next uint64
	deadline := time.After(waitTimeout)
	for got.Len() < n*size {
		select {
		case m := <-s2.in:
			if o := m.GetOutput(); o != nil && len(o.GetData()) > 0 {
				if o.GetOffset() != next {
					t.Fatalf("chunk at offset %d, want %d", o.GetOffset(), next)
				}
				next += uint64(len(o.GetData()))
				got.Write(o.GetData())
			}
		case <-deadline:
			go unwedge(a)
			t.Fatalf("after reconnecting with a full outbox the agent sent only %d of %d bytes", got.Len(), n*size)
		}
	}
	<-produced
	for {
		if res := s2.nextAny(t).GetCommandResult(); res != nil {
			if res.GetCommandId() != "c1" {
				t.Fatalf("result %v", res)
			}
			break
		}
	}
}

// A server that stops reading lets the agent's outbox fill while connected;
// a command request then blocks the agent's receive loop on the outbox (its
// CommandStarted message). If the stream breaks now, the agent must still
// reconnect.
//
// BUG: serve waits for its receive goroutine, which waits on outbox space
// that only a send loop can make, and none runs: the agent never reconnects.
func TestStreamBreakWhileReceiveLoopWaitsOnFullOutbox(t *testing.T) {
	cp, url := startCPWindow(t, 64<<10)
	r, a, s1 := agentOn(t, cp, url, func(c *Config) { c.OutboxBytes = 4096 })
	p := startCommand(t, s1, r, &sandboxv1.CommandRequest{CommandId: "c1", Command: "chatty"})

	// From now on the server reads nothing: the stream's window and then
	// the outbox fill up.
	pauseReads(s1)
	// Chunks bigger than the limit: the send loop blocks on one of them
	// (peeked, not popped), which keeps the box over-full.
	const n, size = 40, 8 << 10
	fillWhileAway(p, n, size)
	// Over-full is proof enough that the send loop is blocked; whether the
	// fake's reader took one more message before its gate held it depends
	// on where it was when the gate closed.
	eventually(t, "outbox full with the send loop blocked", func() bool { return overFull(a) })
	for len(s1.in) > 0 {
		<-s1.in
	}
	if !overFull(a) {
		t.Fatal("outbox drained though the server reads nothing")
	}

	// A command arrives: its start is reported through the full outbox.
	s1.send(commandMsg(&sandboxv1.CommandRequest{CommandId: "c2", Command: "x"}))
	p2 := r.next(t)
	defer p2.exit(ports.CommandResult{})

	// The stream breaks.
	resumeReads(s1)
	s1.dropStream(t)
	select {
	case <-cp.sessions:
	case <-time.After(waitTimeout):
		go unwedge(a)
		t.Fatal("the agent did not reconnect after its stream broke")
	}
}
