package agentrpc

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Compile-time: the service is what the rest of the server uses it as.
var (
	_ ports.AgentLink      = (*Service)(nil)
	_ ports.AgentDirectory = (*Service)(nil)
)

func TestAuthenticationRefused(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct{ name, id, secret string }{
		{"wrong secret", "agent-a", "not-the-secret"},
		{"unknown agent", "ghost", "secret-of-ghost"},
		{"empty secret", "agent-a", ""},
		{"malformed id", "../etc/passwd", "x"},
		{"empty id", "", "x"},
		{"id too long", strings.Repeat("a", 129), "x"},
		{"id with space", "agent a", "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := h.attempt(tc.id, tc.secret, registration(tc.id))
			if got := connect.CodeOf(err); got != connect.CodeUnauthenticated {
				t.Fatalf("code = %v (%v), want unauthenticated", got, err)
			}
		})
	}
	if got := h.svc.Agents(); len(got) != 0 {
		t.Fatalf("refused agents listed: %+v", got)
	}
}

func TestValidAgentID(t *testing.T) {
	for id, want := range map[string]bool{
		"host-01": true, "a": true, "A.b_c-9": true, strings.Repeat("a", 128): true,
		"": false, "-lead": false, ".hidden": false, "../etc": false, "a/b": false, "a b": false,
		strings.Repeat("a", 129): false, "ü": false,
	} {
		if got := ValidAgentID(id); got != want {
			t.Errorf("ValidAgentID(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestCredentialStoreErrorIsUnavailable(t *testing.T) {
	h := newHarness(t)
	h.creds.SetErr(errStore)
	err := h.attempt("agent-a", secretPrefix+"agent-a", registration("agent-a"))
	if got := connect.CodeOf(err); got != connect.CodeUnavailable {
		t.Fatalf("code = %v (%v), want unavailable", got, err)
	}
	h.creds.SetErr(nil)
	if err := h.attempt("agent-a", secretPrefix+"agent-a", registration("agent-a")); err != nil {
		t.Fatalf("after the store recovered: %v", err)
	}
}

func TestFirstMessageMustBeMatchingRegistration(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name  string
		first *sandboxv1.ConnectRequest
	}{
		{"heartbeat first", heartbeat(sandboxv1.AgentStatus_AGENT_STATUS_READY, nil)},
		{"output first", output("cmd-1", stdout, 0, "x")},
		{"registration for another id", registration("agent-b")},
		{"registration without id", &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Registration{Registration: &sandboxv1.Registration{}}}},
		{"nothing sent", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := h.attempt("agent-a", secretPrefix+"agent-a", tc.first)
			if got := connect.CodeOf(err); got != connect.CodeInvalidArgument {
				t.Fatalf("code = %v (%v), want invalid argument", got, err)
			}
		})
	}
	if got := h.svc.Agents(); len(got) != 0 {
		t.Fatalf("agents listed after bad registrations: %+v", got)
	}
}

func TestRegistrationAckAndStatus(t *testing.T) {
	h := newHarness(t)
	connectedAt := h.clock.Now()
	a := h.connectAgent("agent-a")
	if !a.ack.GetAccepted() || a.ack.GetHeartbeatIntervalSeconds() != 7 {
		t.Fatalf("ack = %v, want accepted with a 7 s heartbeat", a.ack)
	}

	info := agentInfoOf(t, h.svc, "agent-a")
	want := ports.AgentInfo{
		ID: "agent-a", Status: "starting", Runtime: "container", Hostname: "host-of-agent-a",
		IPAddress: "10.0.0.5", AgentVersion: "1.2.3", Labels: map[string]string{"zone": "a"},
		Capabilities: []string{"tmux", "git"},
		System:       ports.SystemInfo{OS: "linux", Kernel: "6.1.0", Arch: "amd64", CPUCores: 4, MemoryBytes: 8 << 30, DiskBytes: 100 << 30},
		ConnectedAt:  connectedAt,
	}
	if !reflect.DeepEqual(info, want) {
		t.Fatalf("Agent() =\n%+v\nwant\n%+v", info, want)
	}
	if all := h.svc.Agents(); len(all) != 1 || !reflect.DeepEqual(all[0], want) {
		t.Fatalf("Agents() = %+v", all)
	}

	// A heartbeat that still says "starting" keeps it starting.
	a.send(heartbeat(sandboxv1.AgentStatus_AGENT_STATUS_STARTING, nil))
	hbAt := h.clock.Advance(time.Second)
	m := &sandboxv1.Metrics{CpuPercent: 12.5, MemoryUsedBytes: 1 << 30, MemoryTotalBytes: 8 << 30, DiskUsedBytes: 5, DiskTotalBytes: 10, LoadAvg_1: 0.5, LoadAvg_5: 0.25, LoadAvg_15: 0.125}
	a.send(heartbeat(sandboxv1.AgentStatus_AGENT_STATUS_READY, m))
	eventually(t, "agent ready", func() bool {
		i, _ := h.svc.Agent("agent-a")
		return i.Status == "ready" && i.Metrics != nil
	})
	info = agentInfoOf(t, h.svc, "agent-a")
	wantM := ports.Metrics{CPUPercent: 12.5, MemoryUsedBytes: 1 << 30, MemoryTotalBytes: 8 << 30, DiskUsedBytes: 5, DiskTotalBytes: 10, LoadAvg1: 0.5, LoadAvg5: 0.25, LoadAvg15: 0.125}
	if *info.Metrics != wantM || !info.LastHeartbeat.Equal(hbAt) {
		t.Fatalf("after heartbeat: metrics %+v last heartbeat %v, want %+v at %v", *info.Metrics, info.LastHeartbeat, wantM, hbAt)
	}

	// A separate metrics message replaces the metrics.
	a.send(&sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_Metrics{Metrics: &sandboxv1.Metrics{CpuPercent: 99}}})
	eventually(t, "metrics updated", func() bool {
		i, _ := h.svc.Agent("agent-a")
		return i.Metrics != nil && i.Metrics.CPUPercent == 99
	})

	// Busy and draining agents show as busy.
	a.send(heartbeat(sandboxv1.AgentStatus_AGENT_STATUS_DRAINING, nil))
	eventually(t, "agent busy while draining", func() bool { return agentInfoOf(t, h.svc, "agent-a").Status == "busy" })

	// Silence for more than three intervals makes it stale. (The barrier's
	// own heartbeat says ready.)
	a.barrier()
	h.clock.Advance(3*7*time.Second + time.Second)
	if got := agentInfoOf(t, h.svc, "agent-a").Status; got != "stale" {
		t.Fatalf("status after 22 s of silence = %q, want stale", got)
	}
	a.barrier()
	if got := agentInfoOf(t, h.svc, "agent-a").Status; got != "ready" {
		t.Fatalf("status after a fresh heartbeat = %q, want ready", got)
	}

	// A second registration on the same stream is ignored, not fatal.
	a.send(registration("agent-a"))
	a.barrier()

	// The agent hangs up: it stays listed as disconnected.
	a.hangUp()
	eventually(t, "agent disconnected", func() bool { return agentInfoOf(t, h.svc, "agent-a").Status == "disconnected" })
	if info := agentInfoOf(t, h.svc, "agent-a"); !info.DisconnectedAt.Equal(h.clock.Now()) {
		t.Fatalf("DisconnectedAt = %v, want %v", info.DisconnectedAt, h.clock.Now())
	}
}

func TestNewConnectionReplacesOld(t *testing.T) {
	h := newHarness(t)
	first := h.connectAgent("agent-a")
	first.barrier()

	second := h.connectAgent("agent-a")
	err := first.waitClosed()
	if err == nil {
		t.Fatal("the replaced stream ended without an error")
	}
	if got := connect.CodeOf(err); got != connect.CodeAborted {
		t.Errorf("replaced stream ended with %v (%v), want aborted", got, err)
	}
	// The server tore down the old stream before answering it, so the
	// registry state is final here.
	info := agentInfoOf(t, h.svc, "agent-a")
	if info.Status != "starting" || !info.DisconnectedAt.IsZero() || !info.LastHeartbeat.IsZero() {
		t.Fatalf("after replacement: %+v, want a fresh connected record", info)
	}
	if n := len(h.svc.Agents()); n != 1 {
		t.Fatalf("%d agents listed, want 1", n)
	}

	second.barrier()
	if got := agentInfoOf(t, h.svc, "agent-a").Status; got != "ready" {
		t.Fatalf("status after heartbeat on the new stream = %q", got)
	}

	// Commands go to the new stream.
	cmd, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "true"}, ports.StartOptions{Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := second.recv().GetCommand().GetCommandId(); got != cmd.ID() {
		t.Fatalf("new stream got command %q, want %q", got, cmd.ID())
	}
	second.send(result(cmd.ID(), ports.CommandResult{}))
	if r := waitDone(t, cmd); !r.Success() {
		t.Fatalf("result %+v", r)
	}

	// Closing the new stream does disconnect the agent.
	second.hangUp()
	eventually(t, "agent disconnected", func() bool { return agentInfoOf(t, h.svc, "agent-a").Status == "disconnected" })
}

func TestSweepForgetsDisconnectedAgentsAndOldCommands(t *testing.T) {
	h := newHarness(t)
	a := h.connectAgent("agent-a")
	b := h.connectAgent("agent-b")
	cmd, err := h.svc.Start(context.Background(), "agent-b", ports.CommandSpec{Command: "true"}, ports.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.recv()
	b.send(result(cmd.ID(), ports.CommandResult{}))
	waitDone(t, cmd)

	a.hangUp()
	eventually(t, "agent-a disconnected", func() bool { return agentInfoOf(t, h.svc, "agent-a").Status == "disconnected" })

	// Within the grace nothing is forgotten.
	h.clock.Advance(time.Minute - time.Second)
	h.svc.sweep()
	if _, ok := h.svc.Agent("agent-a"); !ok {
		t.Fatal("agent forgotten before its grace")
	}
	if _, ok := h.svc.Lookup(cmd.ID()); !ok {
		t.Fatal("command forgotten before its retention")
	}

	// Past the grace, Run's sweep forgets the disconnected agent and the
	// finished command, but keeps the connected agent.
	h.clock.Advance(2 * time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { defer close(runDone); h.svc.Run(ctx) }()
	var listed, kept bool
	if !testkit.Within(15*time.Second, func() bool { // its first sweep is a second in
		_, listed = h.svc.Agent("agent-a")
		_, kept = h.svc.Lookup(cmd.ID())
		return !listed && !kept
	}) {
		t.Fatalf("Run did not sweep: agent listed %v, command kept %v", listed, kept)
	}
	cancel()
	<-runDone
	if _, ok := h.svc.Agent("agent-b"); !ok {
		t.Fatal("connected agent swept")
	}
	if _, err := h.svc.Start(context.Background(), "agent-a", ports.CommandSpec{Command: "true"}, ports.StartOptions{}); err != ports.ErrAgentNotFound {
		t.Fatalf("Start on a forgotten agent: %v, want ErrAgentNotFound", err)
	}

	// A forgotten agent may come back.
	h.connectAgent("agent-a")
	if got := agentInfoOf(t, h.svc, "agent-a").Status; got != "starting" {
		t.Fatalf("returning agent status %q", got)
	}
}

// One credential opens a bounded number of streams; the next is refused.
func TestStreamsPerAgentAreBounded(t *testing.T) {
	h := newHarness(t)
	var open []*fakeAgent
	for range maxStreamsPerAgent {
		fa := h.open("agent-a", secretPrefix+"agent-a")
		_ = fa.stream.Send(nil) // the headers alone: authenticated, no registration yet
		open = append(open, fa)
	}
	eventually(t, "the streams to be counted", func() bool {
		return h.svc.streams.count("agent-a") == maxStreamsPerAgent
	})
	if err := h.attempt("agent-a", secretPrefix+"agent-a", registration("agent-a")); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("one stream too many: %v, want resource_exhausted", err)
	}
	// Another agent is not affected, and a closed stream frees its place.
	h.connectAgent("agent-b").barrier()
	open[0].cancel()
	eventually(t, "a place to free", func() bool {
		return h.svc.streams.count("agent-a") < maxStreamsPerAgent
	})
	h.connectAgent("agent-a").barrier()
}

func (c *agentCounts) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

// heldAgents holds the agents named.
type heldAgents struct {
	ports.NoLinkReports
	held map[string]bool
}

func (h heldAgents) AgentHeld(id string) bool { return h.held[id] }

// A held agent (a warm pool's idle member) gets housekeeping commands only,
// and no file work; the others are not affected.
func TestAHeldAgentGetsOnlyHousekeeping(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Reports = heldAgents{held: map[string]bool{"agent-a": true}} })
	a := h.connectAgent("agent-a")
	h.connectAgent("agent-b")
	ctx := context.Background()
	if _, err := h.svc.Start(ctx, "agent-a", ports.CommandSpec{Command: "work"}, ports.StartOptions{}); !errors.Is(err, ports.ErrAgentHeld) {
		t.Fatalf("work on a held agent: %v, want ErrAgentHeld", err)
	}
	if _, err := h.svc.ListFiles(ctx, "agent-a", "/"); !errors.Is(err, ports.ErrAgentHeld) {
		t.Fatalf("file work on a held agent: %v, want ErrAgentHeld", err)
	}
	if _, err := h.svc.Start(ctx, "agent-a", ports.CommandSpec{Command: "echo"}, ports.StartOptions{Housekeeping: true}); err != nil {
		t.Fatalf("housekeeping on a held agent: %v", err)
	}
	if a.recv().GetCommand() == nil {
		t.Fatal("the housekeeping command did not reach the agent")
	}
	if _, err := h.svc.Start(ctx, "agent-b", ports.CommandSpec{Command: "work"}, ports.StartOptions{}); err != nil {
		t.Fatalf("work on an agent not held: %v", err)
	}
}

// Failed logins are logged, but not one line each: a flood of guesses
// leaves one line per agent id per interval, counting the rest.
func TestFailedLoginsAreLoggedRateLimited(t *testing.T) {
	var buf testkit.Buffer
	h := newHarness(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&buf, nil)) })
	for range 20 {
		if err := h.attempt("agent-a", "guess", registration("agent-a")); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatal(err)
		}
	}
	if n := strings.Count(buf.String(), "agent authentication failed"); n != 1 {
		t.Fatalf("%d log lines for 20 failures, want 1:\n%s", n, buf.String())
	}
	h.clock.Advance(loginLogEvery + time.Second)
	_ = h.attempt("agent-a", "guess", registration("agent-a"))
	if out := buf.String(); strings.Count(out, "agent authentication failed") != 2 || !strings.Contains(out, "not_logged_since_last=19") {
		t.Fatalf("after the interval:\n%s", out)
	}
}
