package hostsup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup/internal/agentrecord"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// fakeAgentBin is testdata/fakeagent, built once as "agentic-agent".
var fakeAgentBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hostsup-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeAgentBin = filepath.Join(dir, "agentic-agent")
	out, err := exec.Command("go", "build", "-o", fakeAgentBin, "./testdata/fakeagent").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building fakeagent: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// record is what testdata/fakeagent writes.
type record = agentrecord.Record

type harness struct {
	t        *testing.T
	stateDir string
	recDir   string
	creds    *portsfake.Credentials
	logs     *testkit.Buffer
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	base := t.TempDir()
	h := &harness{
		t:        t,
		stateDir: filepath.Join(base, "host-agents"),
		recDir:   filepath.Join(base, "records"),
		creds:    portsfake.NewCredentials(),
		logs:     &testkit.Buffer{},
	}
	if err := os.Mkdir(h.recDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs last: after the supervisors stopped,
	// kill every fake agent the test started, which would outlive it.
	t.Cleanup(func() {
		for _, r := range h.records("") {
			if argv, _ := readCmdline(r.PID); len(argv) > 0 && filepath.Base(argv[0]) == "agentic-agent" {
				syscall.Kill(-r.PID, syscall.SIGKILL)
			}
		}
		// Each agent's own temp dir outlives it by design, not the test.
		for _, r := range h.records("") {
			os.RemoveAll(AgentTmpDir(filepath.Join(h.stateDir, r.FlagID+".pid")))
		}
		// No secret may ever reach the log.
		logs := h.logs.String()
		for _, r := range h.records("") {
			if r.Secret != "" && strings.Contains(logs, r.Secret) {
				t.Errorf("secret of %s logged", r.FlagID)
			}
		}
		if t.Failed() {
			t.Logf("supervisor log:\n%s", logs)
		}
	})
	return h
}

func (h *harness) config(n int, extraEnv ...string) Config {
	return Config{
		Count:        n,
		AgentBinary:  fakeAgentBin,
		StateDir:     h.stateDir,
		ServerURL:    "http://127.0.0.1:18120",
		Credentials:  h.creds,
		Logger:       slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		ExtraEnv:     append([]string{"FAKEAGENT_RECORD_DIR=" + h.recDir, "FAKEAGENT_EXTRA=extra-value"}, extraEnv...),
		RestartMin:   20 * time.Millisecond,
		RestartMax:   200 * time.Millisecond,
		PollInterval: 20 * time.Millisecond,
	}
}

func (h *harness) start(cfg Config) *Supervisor {
	h.t.Helper()
	s := New(cfg)
	s.killAfter = 300 * time.Millisecond
	h.t.Cleanup(s.Stop)
	if err := s.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	return s
}

// records returns the records of agent id ("" = all), oldest first.
func (h *harness) records(id string) []record {
	ents, _ := os.ReadDir(h.recDir)
	var out []record
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || (id != "" && !strings.HasPrefix(e.Name(), id+"-")) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(h.recDir, e.Name()))
		if err != nil {
			continue
		}
		var r record
		if json.Unmarshal(data, &r) == nil {
			out = append(out, r)
		}
	}
	return out
}

// record waits for the record of agent id's process pid.
func (h *harness) record(id string, pid int) record {
	h.t.Helper()
	var found record
	h.eventually(fmt.Sprintf("record of %s pid %d", id, pid), func() bool {
		for _, r := range h.records(id) {
			if r.PID == pid {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	testkit.Eventually(h.t, 10*time.Second, what, cond)
}

func (h *harness) pidFile(id string) int {
	h.t.Helper()
	data, err := os.ReadFile(filepath.Join(h.stateDir, id+".pid"))
	if err != nil {
		h.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		h.t.Fatal(err)
	}
	return pid
}

// alive is true for a running (not zombie) process.
func alive(pid int) bool {
	if !processExists(pid) {
		return false
	}
	st, err := readProcStat(pid)
	return err == nil && !st.dead()
}

// crash kills agent a and waits until supervisor s runs it again under a
// new pid, which it returns.
func (h *harness) crash(s *Supervisor, a HostAgent) HostAgent {
	h.t.Helper()
	if err := syscall.Kill(a.PID, syscall.SIGKILL); err != nil {
		h.t.Fatal(err)
	}
	var now HostAgent
	h.eventually("restart of "+a.ID, func() bool {
		now = agentByID(s, a.ID)
		return now.PID != 0 && now.PID != a.PID
	})
	return now
}

func agentByID(s *Supervisor, id string) HostAgent {
	for _, a := range s.Agents() {
		if a.ID == id {
			return a
		}
	}
	return HostAgent{}
}

func TestSpawnVerifyAndRestart(t *testing.T) {
	t.Setenv("AGENTIC_OPERATOR_TOKEN", "operator-token-must-not-leak")
	t.Setenv("AGENT_SECRET", "stale-secret-from-server-env")
	h := newHarness(t)
	s := h.start(h.config(2))

	agents := s.Agents()
	if len(agents) != 2 || agents[0].ID != "host-01" || agents[1].ID != "host-02" {
		t.Fatalf("agents %+v", agents)
	}
	for _, a := range agents {
		if a.PID <= 0 || a.Adopted || a.Restarts != 0 || a.StartedAt.IsZero() {
			t.Fatalf("agent %+v", a)
		}
		if !alive(a.PID) {
			t.Fatalf("%s pid %d not running", a.ID, a.PID)
		}
		if got := h.pidFile(a.ID); got != a.PID {
			t.Fatalf("%s pid file %d, want %d", a.ID, got, a.PID)
		}
		r := h.record(a.ID, a.PID)
		if r.FlagID != a.ID || r.EnvID != a.ID || r.Server != "http://127.0.0.1:18120" || r.Extra != "extra-value" {
			t.Fatalf("agent saw %+v", r)
		}
		if want := []string{fakeAgentBin, "--id", a.ID}; !slices.Equal(r.Args, want) {
			t.Fatalf("argv %q, want %q", r.Args, want)
		}
		if r.Secret == "" || r.Secret == "stale-secret-from-server-env" || r.SecretInArgv || r.SecretInEnv != "" {
			t.Fatalf("bad secret handling: secret %q, in argv %v, in the environment %q", r.Secret, r.SecretInArgv, r.SecretInEnv)
		}
		if ok, _ := h.creds.Verify(a.ID, r.Secret); !ok {
			t.Fatalf("%s secret does not verify", a.ID)
		}
		if r.OperatorToken != "" {
			t.Fatal("operator token leaked into the agent environment")
		}
		if r.SID != a.PID || r.PGID != a.PID {
			t.Fatalf("agent not in its own session: sid %d pgid %d pid %d", r.SID, r.PGID, a.PID)
		}
		logPath := filepath.Join(h.stateDir, a.ID+".log")
		h.eventually("agent stdout in its log", func() bool {
			data, _ := os.ReadFile(logPath)
			return strings.Contains(string(data), fmt.Sprintf("fakeagent %s pid %d up", a.ID, a.PID))
		})
		if fi, _ := os.Stat(logPath); fi.Mode().Perm() != 0o600 {
			t.Fatalf("log mode %v", fi.Mode().Perm())
		}
	}
	if fi, _ := os.Stat(h.stateDir); fi.Mode().Perm() != 0o700 {
		t.Fatalf("state dir mode %v", fi.Mode().Perm())
	}
	old := agents[0]
	oldSecret := h.record(old.ID, old.PID).Secret
	other := agents[1]

	// A crash is followed by a restart with a new pid and a new secret.
	now := h.crash(s, old)
	if now.Restarts != 1 || now.Adopted {
		t.Fatalf("after restart %+v", now)
	}
	r := h.record(now.ID, now.PID)
	if r.Secret == oldSecret {
		t.Fatal("restart reused the secret")
	}
	if ok, _ := h.creds.Verify(now.ID, r.Secret); !ok {
		t.Fatal("new secret does not verify")
	}
	if ok, _ := h.creds.Verify(now.ID, oldSecret); ok {
		t.Fatal("old secret still verifies")
	}
	if got := h.pidFile(now.ID); got != now.PID {
		t.Fatalf("pid file %d after restart, want %d", got, now.PID)
	}
	if a := agentByID(s, other.ID); a.PID != other.PID || a.Restarts != 0 {
		t.Fatalf("the other agent was touched: %+v", a)
	}
}

func TestStopLeavesAgentsAndNextSupervisorAdopts(t *testing.T) {
	h := newHarness(t)
	cfg := h.config(2)
	s1 := h.start(cfg)
	before := s1.Agents()
	for _, a := range before {
		h.record(a.ID, a.PID)
	}
	puts := h.creds.Puts()

	s1.Stop()
	time.Sleep(5 * cfg.PollInterval)
	for _, a := range before {
		if !alive(a.PID) {
			t.Fatalf("Stop killed %s", a.ID)
		}
	}

	s2 := h.start(cfg)
	for i, a := range s2.Agents() {
		if a.ID != before[i].ID || a.PID != before[i].PID || !a.Adopted || a.Restarts != 0 {
			t.Fatalf("adopted %+v, was %+v", a, before[i])
		}
	}
	time.Sleep(5 * cfg.PollInterval)
	if n := len(h.records("")); n != 2 {
		t.Fatalf("%d agent processes started, want 2 (no duplicates)", n)
	}
	if h.creds.Puts() != puts {
		t.Fatal("adoption replaced a secret")
	}

	// An adopted agent is not our child; its death is noticed by polling.
	victim := before[1]
	now := h.crash(s2, victim)
	if now.Adopted || now.Restarts != 1 {
		t.Fatalf("after restart %+v", now)
	}
	r := h.record(now.ID, now.PID)
	if ok, _ := h.creds.Verify(now.ID, r.Secret); !ok {
		t.Fatal("new secret does not verify")
	}
	if a := agentByID(s2, before[0].ID); a.PID != before[0].PID || !a.Adopted {
		t.Fatalf("the other agent changed: %+v", a)
	}
}

func TestStalePidFilesSpawnFresh(t *testing.T) {
	h := newHarness(t)
	if err := os.MkdirAll(h.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	// A live agent-looking process with another id is foreign too.
	other := exec.Command(fakeAgentBin, "--id", "host-99")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })

	stale := map[string]string{
		"host-01": strconv.Itoa(dead.Process.Pid), // dead
		"host-02": strconv.Itoa(os.Getpid()),      // this test binary
		"host-03": "not a pid",
		"host-04": strconv.Itoa(other.Process.Pid),
	}
	for id, content := range stale {
		if err := os.WriteFile(filepath.Join(h.stateDir, id+".pid"), []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := h.start(h.config(4))
	for _, a := range s.Agents() {
		if a.Adopted || a.PID <= 0 || strconv.Itoa(a.PID) == stale[a.ID] {
			t.Fatalf("stale pid file adopted: %+v", a)
		}
		if got := h.pidFile(a.ID); got != a.PID {
			t.Fatalf("%s pid file %d, want %d", a.ID, got, a.PID)
		}
		h.record(a.ID, a.PID)
	}
	if !alive(os.Getpid()) || !alive(other.Process.Pid) {
		t.Fatal("foreign process disturbed")
	}
}

// stopAgents runs s.StopAgents, which must return within the test's wait.
func stopAgents(t *testing.T, s *Supervisor) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.StopAgents(context.Background()) }()
	return testkit.Receive(t, 15*time.Second, done, "StopAgents hangs")
}

// stopped checks that the agents are gone, with their pid files.
func (h *harness) stopped(agents []HostAgent) {
	h.t.Helper()
	for _, a := range agents {
		if alive(a.PID) {
			h.t.Fatalf("%s pid %d still running", a.ID, a.PID)
		}
		if _, err := os.Stat(filepath.Join(h.stateDir, a.ID+".pid")); !errors.Is(err, os.ErrNotExist) {
			h.t.Fatalf("%s pid file left: %v", a.ID, err)
		}
	}
}

func TestStopAgents(t *testing.T) {
	h := newHarness(t)
	s := h.start(h.config(2))
	// The SIGKILL would come an hour after the SIGTERM: only the SIGTERM
	// can end the agents within the wait, however slow they are to take it.
	s.killAfter = time.Hour
	agents := s.Agents()
	for _, a := range agents {
		h.record(a.ID, a.PID) // signal handling is set up once the record exists
	}
	if err := stopAgents(t, s); err != nil {
		t.Fatal(err)
	}
	h.stopped(agents)
	for _, a := range agents {
		data, _ := os.ReadFile(filepath.Join(h.stateDir, a.ID+".log"))
		if !strings.Contains(string(data), "fakeagent got SIGTERM") {
			t.Fatalf("%s was not stopped with SIGTERM; log:\n%s", a.ID, data)
		}
	}
	for _, a := range s.Agents() {
		if a.PID != 0 {
			t.Fatalf("agent still listed as running: %+v", a)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(h.records("")); n != 2 {
		t.Fatalf("agents restarted after StopAgents: %d records", n)
	}
	if err := s.Start(context.Background()); err == nil {
		t.Fatal("Start after StopAgents should fail")
	}
}

// An agent that ignores SIGTERM is killed once killAfter passed.
func TestStopAgentsKillsAnAgentIgnoringTerm(t *testing.T) {
	h := newHarness(t)
	s := h.start(h.config(1, "FAKEAGENT_IGNORE_TERM=host-01"))
	agents := s.Agents()
	for _, a := range agents {
		h.record(a.ID, a.PID) // SIGTERM is ignored once the record exists
	}
	if err := stopAgents(t, s); err != nil {
		t.Fatal(err)
	}
	h.stopped(agents)
	if logs := h.logs.String(); !strings.Contains(logs, `msg="host agent ignored SIGTERM; killing" component=hostsup agent=host-01 `) {
		t.Fatalf("host-01 was not killed after ignoring SIGTERM; supervisor log:\n%s", logs)
	}
}

// An operator tool stops agents left by a server without starting a supervisor.
func TestStopAgentsWithoutStart(t *testing.T) {
	h := newHarness(t)
	cfg := h.config(2)
	s1 := h.start(cfg)
	agents := s1.Agents()
	s1.Stop()

	s2 := New(cfg)
	if err := s2.StopAgents(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, a := range agents {
		h.eventually(a.ID+" to end", func() bool { return !alive(a.PID) })
		if _, err := os.Stat(filepath.Join(h.stateDir, a.ID+".pid")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s pid file left: %v", a.ID, err)
		}
	}
}

func TestCrashLoopBacksOff(t *testing.T) {
	h := newHarness(t)
	cfg := h.config(1, "FAKEAGENT_EXIT_AT_ONCE=host-01")
	cfg.RestartMin = 10 * time.Millisecond
	cfg.RestartMax = 40 * time.Millisecond
	s := h.start(cfg)
	h.eventually("several restarts", func() bool { return agentByID(s, "host-01").Restarts >= 4 })
	s.Stop()
	logs := h.logs.String()
	for _, want := range []string{"in=10ms", "in=20ms", "in=40ms", "exit status 3"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("log lacks %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "in=80ms") {
		t.Fatal("backoff exceeded RestartMax")
	}
}

func TestBackoff(t *testing.T) {
	b := backoff{min: time.Second, max: 30 * time.Second}
	var got []time.Duration
	for range 7 {
		got = append(got, b.next())
	}
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30}
	for i := range want {
		want[i] *= time.Second
	}
	if !slices.Equal(got, want) {
		t.Fatalf("delays %v, want %v", got, want)
	}
	b.reset()
	if d := b.next(); d != time.Second {
		t.Fatalf("after reset %v", d)
	}
}

// Agents inherit only an allowlist of the server's environment: nothing
// the server knows (its secrets dir, aiwg serve, docker's socket, tokens).
func TestAgentEnv(t *testing.T) {
	base := []string{"PATH=/bin", "AGENT_SECRET=old", "AGENTIC_OPERATOR_TOKEN=tok", "HOME=/root", "AGENT_ID=x", "NOEQ",
		"SECRETS_DIR=/var/lib/agentic-sandbox/secrets", "AIWG_SERVE_ENDPOINT=http://aiwg", "DOCKER_HOST=unix:///var/run/docker.sock",
		"AWS_SECRET_ACCESS_KEY=k", "LC_ALL=C.UTF-8", "TERM=xterm", "AGENT_RECONNECT_MIN=1s"}
	extra := []string{"HOME=/home/agent", "FOO=bar", "AGENT_ID=nope"}
	got := agentEnv(base, extra, "host-01", "http://s")
	want := []string{"PATH=/bin", "HOME=/home/agent", "LC_ALL=C.UTF-8", "TERM=xterm", "AGENT_RECONNECT_MIN=1s", "FOO=bar", "AGENT_ID=host-01", "MANAGEMENT_SERVER=http://s"}
	if !slices.Equal(got, want) {
		t.Fatalf("env %q\nwant %q", got, want)
	}
}

func TestConfigAndIDs(t *testing.T) {
	if got := AgentID(1) + "," + AgentID(12) + "," + AgentID(100); got != "host-01,host-12,host-100" {
		t.Fatal(got)
	}
	h := newHarness(t)
	good := h.config(1)
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Config){
		"missing binary": func(c *Config) { c.AgentBinary = filepath.Join(t.TempDir(), "nope") },
		"not executable": func(c *Config) { c.AgentBinary = plain },
		"no credentials": func(c *Config) { c.Credentials = nil },
		"no server":      func(c *Config) { c.ServerURL = "" },
		"no state dir":   func(c *Config) { c.StateDir = "" },
	} {
		cfg := good
		mutate(&cfg)
		s := New(cfg)
		if err := s.Start(context.Background()); err == nil {
			t.Errorf("%s: Start succeeded", name)
		}
		s.Stop()
	}
	// Zero agents is a no-op, even without the rest of the config.
	s := New(Config{})
	if err := s.Start(context.Background()); err != nil || len(s.Agents()) != 0 {
		t.Fatalf("zero agents: %v %v", err, s.Agents())
	}
	if err := s.Start(context.Background()); err == nil {
		t.Fatal("second Start succeeded")
	}
	s.Stop()
	if len(h.records("")) != 0 {
		t.Fatal("an invalid config started an agent")
	}
}

// The supervision context ending is like Stop: agents stay.
func TestContextEndLeavesAgents(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	s := New(h.config(1))
	t.Cleanup(s.Stop)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pid := s.Agents()[0].PID
	h.record("host-01", pid)
	cancel()
	s.Stop() // returns once the supervising goroutines saw ctx end
	if !alive(pid) {
		t.Fatal("agent died with the context")
	}
}
