package environment

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// downs is a fake ports.AgentDowner: the agents it was told are down.
type downs struct {
	mu    sync.Mutex
	calls []string
}

func (d *downs) AgentDown(_ context.Context, agentID, _ string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, agentID)
}

func (d *downs) got() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.calls...)
}

// countingDir counts the looks at the directory: rounds of the agent
// watch (and the looks into a disconnect) ask it.
type countingDir struct {
	*portsfake.Directory
	looks atomic.Int64
}

func (d *countingDir) Agent(id string) (ports.AgentInfo, bool) {
	d.looks.Add(1)
	return d.Directory.Agent(id)
}

// lookRuntime counts Inspects (the test itself never inspects: it reads
// with Get) and runs onLook after each.
type lookRuntime struct {
	ports.Runtime
	looks  atomic.Int32
	onLook func(n int32)
}

func (r *lookRuntime) Inspect(ctx context.Context, n string) (ports.Environment, error) {
	e, err := r.Runtime.Inspect(ctx, n)
	if k := r.looks.Add(1); r.onLook != nil {
		r.onLook(k)
	}
	return e, err
}

// watched is a fixture whose service watches its agents (every
// millisecond, backing off from one), with one ready environment "box"
// on rt (the fake runtime wrapped, or rt itself when given).
type watched struct {
	*fixture
	dir   *countingDir
	downs *downs
	rt    *lookRuntime
}

func newWatched(t *testing.T, wrap func(f *fixture) ports.Runtime) *watched {
	t.Helper()
	f := newFixture(t, time.Minute)
	w := &watched{fixture: f, dir: &countingDir{Directory: f.agents}, downs: &downs{}}
	var inner ports.Runtime = f.rt
	if wrap != nil {
		inner = wrap(f)
	}
	w.rt = &lookRuntime{Runtime: inner}
	f.svc.cfg.Runtimes["watched"] = w.rt
	f.svc.cfg.Agents = w.dir
	f.svc.cfg.AgentDown = w.downs
	f.svc.cfg.AgentWatchEvery, f.svc.cfg.AgentDownBackoff = time.Millisecond, time.Millisecond
	f.svc.Recover(context.Background())
	req := Request{Runtime: "watched", Name: "box"}
	if slices.Contains(inner.Capabilities().Limits, ports.LimitMemoryMB) {
		req.Resources.MemoryMB = 64 // a runtime that hibernates with memory needs it
	}
	if _, err := f.svc.Create(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	f.agents.Add(ports.AgentInfo{ID: "box", Status: ports.AgentReady, ConnectedAt: time.Now()})
	testkit.Eventually(t, 15*time.Second, "box ready", func() bool { e, _ := f.svc.Get("box"); return e.State == StateReady })
	return w
}

// disconnect shows box's agent disconnected since at.
func (w *watched) disconnect(at time.Time) {
	w.agents.Add(ports.AgentInfo{ID: "box", Status: ports.AgentDisconnected, DisconnectedAt: at})
}

// runtimeSays sets what the fake runtime says of box.
func (w *watched) runtimeSays(st ports.EnvState, detail string) {
	w.fixture.rt.mu.Lock()
	defer w.fixture.rt.mu.Unlock()
	e := w.fixture.rt.envs["box"]
	e.State, e.Detail = st, detail
	w.fixture.rt.envs["box"] = e
}

// settle lets the watch make more rounds (each looks at the directory),
// then ends the service, so that every look it began is over.
// wantDownOnce waits for the agent's commands to be ended, lets the watch
// settle, and wants them ended exactly once.
func (w *watched) wantDownOnce(t *testing.T) {
	t.Helper()
	testkit.Eventually(t, 15*time.Second, "the agent's commands ended", func() bool { return len(w.downs.got()) > 0 })
	w.settle(t)
	if got := w.downs.got(); len(got) != 1 || got[0] != "box" {
		t.Fatalf("AgentDown calls %v, want [box] once", got)
	}
}

func (w *watched) settle(t *testing.T) {
	t.Helper()
	from := w.dir.looks.Load()
	testkit.Eventually(t, 15*time.Second, "more rounds of the agent watch", func() bool { return w.dir.looks.Load() >= from+20 })
	w.svc.Close()
}

// The agent's process died (kill -9): the link sees it disconnect, the
// runtime says failed. The environment is marked failed and what its agent
// ran ends, once, without anyone looking at the environment.
func TestAgentGoneWithItsEnvironmentEndsItsCommandsOnce(t *testing.T) {
	w := newWatched(t, nil)
	w.runtimeSays(ports.EnvFailed, "agent process: signal: killed")
	w.disconnect(time.Now())
	w.wantDownOnce(t)
	if e, _ := w.svc.Get("box"); e.State != StateFailed || e.Error != "agent process: signal: killed" {
		t.Fatalf("box: %s %q, want failed with the runtime's reason", e.State, e.Error)
	}
}

// A refresh (GET, a listing) that marks the environment failed between
// the watch's look and its decision does not make the watch miss it.
func TestAgentGoneWithItsEnvironmentSeenFailedByARefreshToo(t *testing.T) {
	w := newWatched(t, nil)
	w.rt.onLook = func(n int32) {
		if n == 1 {
			if e, _ := w.svc.Inspect(context.Background(), "box"); e.State != StateFailed {
				t.Errorf("the refresh left box %s", e.State)
			}
		}
	}
	w.runtimeSays(ports.EnvFailed, "agent process: signal: killed")
	w.disconnect(time.Now())
	w.wantDownOnce(t)
}

// An operator's stop: the agent goes with it, and so does what it ran that
// did not report.
func TestAgentOfAStoppedEnvironmentEndsItsCommands(t *testing.T) {
	w := newWatched(t, nil)
	if _, err := w.svc.Stop(context.Background(), "box"); err != nil {
		t.Fatal(err)
	}
	w.disconnect(time.Now())
	w.wantDownOnce(t)
	if e, _ := w.svc.Get("box"); e.State != StateStopped {
		t.Fatalf("box: %s, want stopped", e.State)
	}
}

// A disconnect of an environment its runtime says runs (or keeps asleep)
// is its link's alone: looked into a few times, then left to the link's
// grace; the environment's state is not touched.
func TestAgentDisconnectedFromARunningEnvironmentEndsNothing(t *testing.T) {
	for _, st := range []ports.EnvState{ports.EnvRunning, ports.EnvHibernated, ports.EnvPaused} {
		t.Run(string(st), func(t *testing.T) {
			w := newWatched(t, nil)
			w.runtimeSays(st, "")
			w.disconnect(time.Now())
			testkit.Eventually(t, 15*time.Second, "every look at the runtime", func() bool { return w.rt.looks.Load() >= agentDownLooks })
			w.settle(t)
			if got := w.downs.got(); len(got) != 0 {
				t.Fatalf("AgentDown calls %v, want none", got)
			}
			if n := w.rt.looks.Load(); n != agentDownLooks {
				t.Fatalf("%d looks at the runtime for one disconnect, want %d", n, agentDownLooks)
			}
			if e, _ := w.svc.Get("box"); e.State != StateReady {
				t.Fatalf("box: %s, want ready (as last seen)", e.State)
			}
		})
	}
}

// An agent back before its runtime says the environment failed keeps its
// commands (its report settles them).
func TestAgentBackBeforeItsEnvironmentFailsEndsNothing(t *testing.T) {
	w := newWatched(t, nil)
	w.rt.onLook = func(n int32) {
		if n == 1 { // after the first look (running), it is back; the runtime fails later
			w.agents.Add(ports.AgentInfo{ID: "box", Status: ports.AgentReady, ConnectedAt: time.Now()})
			w.runtimeSays(ports.EnvFailed, "later")
		}
	}
	w.disconnect(time.Now())
	testkit.Eventually(t, 15*time.Second, "a look at the runtime", func() bool { return w.rt.looks.Load() >= 1 })
	w.settle(t)
	if got := w.downs.got(); len(got) != 0 {
		t.Fatalf("AgentDown calls %v, want none", got)
	}
}

// A hibernation takes the agent away on purpose: its commands are awaited
// (not looked into), even when its wake fails and leaves it failed.
func TestAgentOfAHibernatedEnvironmentEndsNothing(t *testing.T) {
	var sl *sleeper
	w := newWatched(t, func(f *fixture) ports.Runtime {
		sl = &sleeper{fakeRuntime: f.rt, agents: f.agents}
		return sl
	})
	ctx := context.Background()
	if e, err := w.svc.Hibernate(ctx, "box"); err != nil || e.State != StateHibernated {
		t.Fatalf("hibernate: %+v %v", e, err)
	}
	from := w.dir.looks.Load()
	testkit.Eventually(t, 15*time.Second, "rounds of the agent watch", func() bool { return w.dir.looks.Load() >= from+20 })
	sl.mu.Lock()
	sl.wakeErr, sl.wakeLeaves = errors.New("saved state lost"), ports.EnvFailed
	sl.mu.Unlock()
	if _, err := w.svc.Wake(ctx, "box"); err == nil {
		t.Fatal("the wake did not fail")
	}
	testkit.Eventually(t, 15*time.Second, "box failed by its wake", func() bool { e, _ := w.svc.Get("box"); return e.State == StateFailed })
	w.settle(t)
	if got := w.downs.got(); len(got) != 0 {
		t.Fatalf("AgentDown calls %v, want none", got)
	}
}

func TestAgentGoneWithRule(t *testing.T) {
	for _, c := range []struct {
		state State
		obs   Observation
		want  bool
	}{
		{StateReady, Observation{Runtime: ports.EnvFailed}, true},
		{StateReady, Observation{Runtime: ports.EnvStopped}, true},
		{StateReady, Observation{Gone: true}, true},
		{StateFailed, Observation{Runtime: ports.EnvFailed}, true},
		{StateStopped, Observation{Runtime: ports.EnvStopped}, true},
		{StateBooting, Observation{Runtime: ports.EnvFailed}, true},
		{StateReady, Observation{Runtime: ports.EnvFailed, AgentConnected: true}, false},
		{StateReady, Observation{Runtime: ports.EnvRunning}, false},
		{StateReady, Observation{Runtime: ports.EnvCreating}, false},
		{StateReady, Observation{Runtime: ports.EnvPaused}, false},
		{StateReady, Observation{Runtime: ports.EnvHibernated}, false},
		{StateHibernating, Observation{Runtime: ports.EnvStopped}, false},
		{StateHibernated, Observation{Runtime: ports.EnvFailed}, false},
		{StateWaking, Observation{Runtime: ports.EnvFailed}, false},
		{StateDeleting, Observation{Gone: true}, false},
		{StateProvisioning, Observation{Runtime: ports.EnvFailed}, false},
	} {
		if got := AgentGoneWith(c.state, c.obs); got != c.want {
			t.Errorf("AgentGoneWith(%s, %+v) = %v, want %v", c.state, c.obs, got, c.want)
		}
	}
}
