package environment

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// fakeRenamer plays the agent: renamed, it registers again as the new id.
type fakeRenamer struct {
	agents *portsfake.Directory
	err    error
	calls  []string
	mu     sync.Mutex
}

func (r *fakeRenamer) RenameAgent(_ context.Context, id, newID, secret string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, id+"->"+newID)
	if r.err != nil {
		return r.err
	}
	if secret == "" {
		return errors.New("no secret")
	}
	r.agents.Remove(id)
	r.agents.SetStatus(newID, ports.AgentReady)
	return nil
}

func (r *fakeRuntime) has(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.envs[name]
	return ok
}

type poolFixture struct {
	*fixture
	pools   *portsfake.PoolStore
	renamer *fakeRenamer
	link    ports.AgentLink
}

func newPoolFixture(t *testing.T, prepare func(*poolFixture)) *poolFixture {
	f := &poolFixture{fixture: &fixture{rt: newFakeRuntime(), agents: portsfake.NewDirectory()}, pools: portsfake.NewPoolStore()}
	f.creds = newFixture(t, time.Minute).creds
	f.renamer = &fakeRenamer{agents: f.agents}
	if prepare != nil {
		prepare(f)
	}
	f.svc = New(Config{Runtimes: map[string]ports.Runtime{"fake": f.rt}, Agents: f.agents, Credentials: f.creds, Clock: clock.Wall{},
		Bootstrap: ports.AgentBootstrap{Binary: "/bin/agent"}, ReadyTimeout: time.Minute, Pools: f.pools, Renamer: f.renamer, Link: f.link})
	t.Cleanup(f.svc.Close)
	f.svc.Recover(context.Background())
	return f
}

// eventually waits up to 15 s for cond, failing with what.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, 15*time.Second, what, cond)
}

// waitIdle plays the members' agents (each provisioned member's agent
// connects) until the pool has idle members.
func (f *poolFixture) waitIdle(t *testing.T, pool string, idle int) PoolStatus {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, _ := f.svc.Pool(pool)
		for _, m := range st.Members {
			if m.State == StateBooting {
				f.agents.SetStatus(m.Name, "ready")
			}
		}
		if st.Idle == idle && len(st.Members) == idle {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s: %+v, want %d idle", pool, st, idle)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAPoolMemberIsTakenOnceUnderTheCallersName(t *testing.T) {
	f := newPoolFixture(t, nil)
	if _, err := f.svc.PutPool(context.Background(), ports.Pool{Name: "p", Runtime: "fake", Size: 1}); err != nil {
		t.Fatal(err)
	}
	member := f.waitIdle(t, "p", 1).Members[0].Name
	if !strings.HasPrefix(member, "p-") || !has(f.creds, member) {
		t.Fatalf("member %q, credential %v", member, has(f.creds, member))
	}
	if _, ok := f.svc.Get(member); ok || len(f.svc.List(context.Background())) != 0 {
		t.Fatal("an idle member is visible as an environment")
	}
	if err := f.svc.Delete(context.Background(), member); !errors.Is(err, ports.ErrEnvNotFound) {
		t.Fatalf("deleting an idle member by name: %v", err)
	}

	e, err := f.svc.Create(context.Background(), Request{Runtime: "fake", Name: "mine"})
	if err != nil || e.State != StateReady || e.AgentID != "mine" || e.ProvisionTime <= 0 {
		t.Fatalf("take: %+v %v", e, err)
	}
	if has(f.creds, member) || !has(f.creds, "mine") || claimOf(f, member) != "mine" {
		t.Fatalf("credentials: member %v, mine %v; claims %v", has(f.creds, member), has(f.creds, "mine"), claims(f))
	}
	if f.rt.has("mine") {
		t.Fatal("a take provisioned")
	}
	// The pool refills with another member; while it comes up, a second
	// create of the spec is a miss and provisions.
	eventually(t, "no other member warming after the take", func() bool {
		st, _ := f.svc.Pool("p")
		return st.Hits == 1 && st.Warming == 1 && len(st.Members) == 1 && st.Members[0].Name != member
	})
	other, err := f.svc.Create(context.Background(), Request{Runtime: "fake", Name: "other"})
	if err != nil || other.State != StateBooting {
		t.Fatalf("a create while no member is idle: %+v %v", other, err)
	}
	if st, _ := f.svc.Pool("p"); st.Misses != 1 {
		t.Fatalf("misses %d", st.Misses)
	}
	// A name already taken is refused before any member is touched.
	if _, err := f.svc.Create(context.Background(), Request{Runtime: "fake", Name: "mine"}); !errors.Is(err, ports.ErrEnvExists) {
		t.Fatalf("a second mine: %v", err)
	}

	// Deleting the caller's environment destroys the member it was.
	if err := f.svc.Delete(context.Background(), "mine"); err != nil {
		t.Fatal(err)
	}
	if f.rt.has(member) || has(f.creds, "mine") {
		t.Fatal("the taken member outlived its environment")
	}
	if _, claimed := claims(f)[member]; claimed {
		t.Fatal("its claim outlived it")
	}
}

// A hand-over that fails before the agent is told leaves the member idle
// in its pool and the caller's environment provisioned; a name whose agent
// has a credential is refused and the member stays idle.
func TestAFailedTakeLeavesTheMemberAndProvisions(t *testing.T) {
	f := newPoolFixture(t, nil)
	if _, err := f.svc.PutPool(context.Background(), ports.Pool{Name: "p", Runtime: "fake", Size: 1}); err != nil {
		t.Fatal(err)
	}
	member := f.waitIdle(t, "p", 1).Members[0].Name

	if err := f.creds.Put("hand-made", "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Create(context.Background(), Request{Runtime: "fake", Name: "hand-made"}); !errors.Is(err, ports.ErrEnvExists) {
		t.Fatalf("a name with a credential: %v", err)
	}
	if secretOf(f.creds, "hand-made") != "s" {
		t.Fatal("a refused take replaced someone's credential")
	}
	if st := f.waitIdle(t, "p", 1); st.Members[0].Name != member {
		t.Fatalf("after a refused take: %+v", st)
	}

	f.renamer.mu.Lock()
	f.renamer.err = ports.ErrAgentNotConnected
	f.renamer.mu.Unlock()
	e, err := f.svc.Create(context.Background(), Request{Runtime: "fake", Name: "mine"})
	if err != nil || e.State != StateBooting {
		t.Fatalf("create when the rename fails: %+v %v", e, err)
	}
	if !f.rt.has("mine") {
		t.Fatal("the caller's environment was not provisioned")
	}
	f.rt.mu.Lock()
	minesSecret := f.rt.specs["mine"].Agent.Secret
	f.rt.mu.Unlock()
	if has(f.creds, "mine") && secretOf(f.creds, "mine") != minesSecret {
		t.Fatal("the failed take's credential for mine is left")
	}
	// The member the agent may half know is replaced, never handed out.
	eventually(t, "the member of a failed rename was not destroyed", func() bool { return !f.rt.has(member) })
}

// After a restart: a claimed member is the caller's environment, an
// unclaimed one an idle member again, and one of a deleted pool goes.
func TestRecoverFindsClaimsAndMembers(t *testing.T) {
	f := newPoolFixture(t, func(f *poolFixture) {
		label := func(pool string) map[string]string { return map[string]string{ports.LabelPool: pool} }
		f.rt.envs["p-aaaa0000"] = ports.Environment{Name: "p-aaaa0000", State: ports.EnvRunning, Labels: label("p")}
		f.rt.envs["p-bbbb0000"] = ports.Environment{Name: "p-bbbb0000", State: ports.EnvRunning, Labels: label("p")}
		f.rt.envs["q-cccc0000"] = ports.Environment{Name: "q-cccc0000", State: ports.EnvRunning, Labels: label("q")}
		_ = f.pools.PutPool(context.Background(), ports.Pool{Name: "p", Runtime: "fake", Size: 1})
		_ = f.pools.PutClaim(context.Background(), "p-bbbb0000", "mine")
		f.agents.SetStatus("mine", ports.AgentReady)
		f.agents.SetStatus("p-aaaa0000", ports.AgentReady)
	})
	e := waitState(t, f.svc, "mine", StateReady)
	if e.AgentID != "mine" {
		t.Fatalf("recovered %+v", e)
	}
	if st := f.waitIdle(t, "p", 1); st.Members[0].Name != "p-aaaa0000" {
		t.Fatalf("pool after recovery: %+v", st)
	}
	eventually(t, "a member of a deleted pool was kept", func() bool { return !f.rt.has("q-cccc0000") })
	if err := f.svc.Delete(context.Background(), "mine"); err != nil {
		t.Fatal(err)
	}
	if f.rt.has("p-bbbb0000") {
		t.Fatal("deleting the recovered environment left its member on the runtime")
	}
}

// claims is what the pool store holds: member -> environment.
func claims(f *poolFixture) map[string]string {
	c, _ := f.pools.Claims(context.Background())
	return c
}

func claimOf(f *poolFixture, member string) string { return claims(f)[member] }

// whatRan is what ran where on link: "agent:command", marked when it was not
// the server's housekeeping.
func whatRan(link *portsfake.Link) []string {
	var out []string
	for _, c := range link.Commands() {
		r := c.AgentID() + ":" + c.Spec.Command
		if !c.Opts.Housekeeping {
			r += " (not housekeeping)"
		}
		out = append(out, r)
	}
	return out
}

// A member is offered only once its warm-up commands have run there.
func TestAMemberIsIdleOnlyWhenWarm(t *testing.T) {
	hold := make(chan struct{}) // while open, commands do not end
	link := portsfake.NewLink(portsfake.WithScript(func(c *portsfake.Command) { <-hold; c.Exit(0) }))
	f := newPoolFixture(t, func(f *poolFixture) { f.link = link })
	if _, err := f.svc.PutPool(context.Background(), ports.Pool{Name: "p", Runtime: "fake", Size: 1}); err != nil {
		t.Fatal(err)
	}
	var member string
	deadline := time.Now().Add(15 * time.Second)
	for {
		ran := whatRan(link)
		st, _ := f.svc.Pool("p")
		for _, m := range st.Members {
			f.agents.SetStatus(m.Name, "ready")
			member = m.Name
		}
		if len(ran) == 1 {
			if ran[0] != member+":echo" || st.Idle != 0 {
				t.Fatalf("warm-up %v, pool %+v", ran, st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warm-up ran: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if e, _ := f.svc.Create(context.Background(), Request{Runtime: "fake", Name: "early"}); e.State == StateReady {
		t.Fatal("a member still warming up was handed out")
	}
	close(hold)
	f.waitIdle(t, "p", 1)
	if ran := whatRan(link); len(ran) != warmRuns {
		t.Fatalf("warm-up ran %v, want %d runs", ran, warmRuns)
	}
}

// keepingRuntime is a runtime that must be told a taken member's identity.
type keepingRuntime struct {
	*fakeRuntime
	mu   sync.Mutex
	kept []string
}

func (r *keepingRuntime) KeepIdentity(_ context.Context, name, agentID, secret string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if secret == "" {
		return errors.New("no secret")
	}
	r.kept = append(r.kept, name+"->"+agentID)
	return nil
}

// A take tells a runtime that keeps identities (Kubernetes) the member's
// new one, with the secret the caller's credential holds.
func TestATakeTellsTheRuntimeTheMembersNewIdentity(t *testing.T) {
	keeper := &keepingRuntime{fakeRuntime: newFakeRuntime()}
	f := newPoolFixture(t, nil)
	f.svc.Close()
	f.rt = keeper.fakeRuntime
	f.svc = New(Config{Runtimes: map[string]ports.Runtime{"fake": keeper}, Agents: f.agents, Credentials: f.creds, Clock: clock.Wall{},
		Bootstrap: ports.AgentBootstrap{Binary: "/bin/agent"}, ReadyTimeout: time.Minute, Pools: f.pools, Renamer: f.renamer})
	t.Cleanup(f.svc.Close)
	f.svc.Recover(context.Background())
	if _, err := f.svc.PutPool(context.Background(), ports.Pool{Name: "p", Runtime: "fake", Size: 1}); err != nil {
		t.Fatal(err)
	}
	member := f.waitIdle(t, "p", 1).Members[0].Name
	if _, err := f.svc.Create(context.Background(), Request{Runtime: "fake", Name: "mine"}); err != nil {
		t.Fatal(err)
	}
	// Off the take's path: told shortly after.
	eventually(t, "the runtime told "+member+"->mine", func() bool {
		keeper.mu.Lock()
		defer keeper.mu.Unlock()
		return len(keeper.kept) == 1 && keeper.kept[0] == member+"->mine"
	})
}

// waitsForItsAgent is a runtime whose engine never reports the environment
// running: Provision returns only when told the agent registered.
type waitsForItsAgent struct{ *fakeRuntime }

func (w waitsForItsAgent) Provision(ctx context.Context, spec ports.EnvironmentSpec) (ports.Environment, error) {
	select {
	case <-spec.AgentConnected:
		return w.fakeRuntime.Provision(ctx, spec)
	case <-ctx.Done():
		return ports.Environment{}, ctx.Err()
	case <-time.After(15 * time.Second):
		return ports.Environment{}, errors.New("never told the agent registered")
	}
}

// Provision is told when the environment's agent registers: a runtime whose
// engine reports a running environment late may return then.
func TestProvisionIsToldWhenTheAgentRegisters(t *testing.T) {
	f := newFixture(t, time.Minute)
	f.svc.cfg.Runtimes["late"] = waitsForItsAgent{f.rt}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The agent registers while Provision waits.
		eventually(t, "provisioning under way", func() bool {
			e, ok := f.svc.Get("e1")
			return ok && e.State == StateProvisioning
		})
		f.agents.SetStatus("e1", ports.AgentReady)
	}()
	e, err := f.svc.Create(context.Background(), Request{Runtime: "late", Name: "e1"})
	<-done
	if err != nil || e.State == StateFailed {
		t.Fatalf("create: %+v, %v", e, err)
	}
	if !f.rt.has("e1") {
		t.Fatal("Provision did not complete")
	}
}
