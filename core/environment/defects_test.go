package environment

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// recordingRetirer remembers which agents were retired, and why.
type recordingRetirer struct {
	mu      sync.Mutex
	retired []string
}

func (r *recordingRetirer) RetireAgent(_ context.Context, id, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retired = append(r.retired, id+":"+reason)
}

// gatedDestroy holds every Destroy until the test opens the gate.
type gatedDestroy struct {
	*fakeRuntime
	entered chan struct{}
	gate    chan struct{}
}

func (g gatedDestroy) Destroy(ctx context.Context, n string) error {
	g.entered <- struct{}{}
	<-g.gate
	return g.fakeRuntime.Destroy(ctx, n)
}

func TestCloseEndsTheWaitsForAgentsAtOnce(t *testing.T) {
	f := newFixture(t, time.Hour) // an agent that never comes would hold Close for an hour
	ctx := context.Background()
	if _, err := f.svc.Create(ctx, Request{Runtime: "fake", Name: "quiet"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Create(ctx, Request{Runtime: "fake", Name: "restarted"}); err != nil {
		t.Fatal(err)
	}
	// Start's wait runs beside Create's: both must end with Close.
	if _, err := f.svc.Start(ctx, "restarted"); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { f.svc.Close(); close(closed) }()
	testkit.Receive(t, 30*time.Second, closed, "Close is still waiting for agents that never registered")
}

func TestCreateNeverTouchesAnotherAgentsCredential(t *testing.T) {
	f := newFixture(t, time.Minute)
	ctx := context.Background()
	_ = f.creds.Put("hand-made", "their-secret")

	// A valid request for the name: refused, the credential untouched.
	if _, err := f.svc.Create(ctx, Request{Runtime: "fake", Name: "hand-made"}); !errors.Is(err, ports.ErrEnvExists) {
		t.Fatalf("create over an existing credential: %v, want ErrEnvExists", err)
	}
	// An invalid one too.
	if _, err := f.svc.Create(ctx, Request{Runtime: "fake", Name: "hand-made", Network: "bogus"}); !errors.Is(err, ports.ErrInvalidSpec) {
		t.Fatalf("invalid spec: %v", err)
	}
	if got := secretOf(f.creds, "hand-made"); got != "their-secret" {
		t.Fatalf("the existing agent's credential became %q", got)
	}
	if _, ok := f.svc.Get("hand-made"); ok || len(f.rt.specs) != 0 {
		t.Fatalf("a refused create left an environment or a provision: %v", f.rt.specs)
	}

	// A runtime that refuses the spec itself: the credential this call
	// made is removed again, nothing else.
	f.rt.provision = fmt.Errorf("%w: the engine has no such image", ports.ErrInvalidSpec)
	if _, err := f.svc.Create(ctx, Request{Runtime: "fake", Name: "fresh"}); !errors.Is(err, ports.ErrInvalidSpec) {
		t.Fatalf("runtime refusal: %v", err)
	}
	if has(f.creds, "fresh") || secretOf(f.creds, "hand-made") != "their-secret" {
		t.Fatalf("after a refused provision: %v", f.creds)
	}
}

func TestDeleteRetiresTheAgentAtOnce(t *testing.T) {
	f := newFixture(t, time.Minute)
	ret := &recordingRetirer{}
	f.svc.cfg.Retire = ret
	ctx := context.Background()
	if _, err := f.svc.Create(ctx, Request{Runtime: "fake", Name: "box"}); err != nil {
		t.Fatal(err)
	}
	f.agents.SetStatus("box", "ready")
	waitState(t, f.svc, "box", StateReady)
	if err := f.svc.Delete(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	ret.mu.Lock()
	defer ret.mu.Unlock()
	if len(ret.retired) != 1 || ret.retired[0] != "box:"+ports.ReasonEnvironmentDeleted {
		t.Fatalf("retired %v, want box with reason %s", ret.retired, ports.ReasonEnvironmentDeleted)
	}
	if has(f.creds, "box") {
		t.Fatal("the credential outlived its environment")
	}
}

func TestConcurrentDeletesOfOneEnvironment(t *testing.T) {
	f := newFixture(t, time.Minute)
	gated := gatedDestroy{fakeRuntime: f.rt, entered: make(chan struct{}, 8), gate: make(chan struct{})}
	f.svc.cfg.Runtimes["gated"] = gated
	ret := &recordingRetirer{}
	f.svc.cfg.Retire = ret
	ctx := context.Background()
	if _, err := f.svc.Create(ctx, Request{Runtime: "gated", Name: "twice"}); err != nil {
		t.Fatal(err)
	}
	const n = 8
	first := make(chan error, 1)
	go func() { first <- f.svc.Delete(ctx, "twice") }()
	<-gated.entered // the first Delete is destroying
	others := make(chan error, n-1)
	for range n - 1 {
		go func() { others <- f.svc.Delete(ctx, "twice") }()
	}
	ok := 0
	check := func(err error) {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ports.ErrEnvNotFound):
			t.Errorf("a concurrent Delete: %v", err)
		}
	}
	// The others answer while the first still destroys: none may destroy again.
	for range n - 1 {
		select {
		case err := <-others:
			check(err)
		case <-gated.entered:
			t.Fatal("a second Delete destroyed the environment again")
		case <-time.After(10 * time.Second):
			t.Fatal("a second Delete is stuck behind the first")
		}
	}
	close(gated.gate)
	check(<-first)
	if ok != 1 || len(ret.retired) != 1 {
		t.Fatalf("%d deletes succeeded and %d retirements, want exactly one of each", ok, len(ret.retired))
	}
	if _, ok := f.svc.Get("twice"); ok {
		t.Fatal("still listed")
	}
}

// A public preview mark belongs to one environment: deleting it drops its
// marks, and a new environment under the same name starts with none (a
// mark left by a deletion that did not pass here must not open it).
func TestPublicPortsGoWithTheirEnvironment(t *testing.T) {
	f := newFixture(t, time.Minute)
	marks := portsfake.NewPublicPorts()
	f.svc.cfg.PublicPorts = marks
	ctx := context.Background()
	now := time.Now()
	if _, err := f.svc.Create(ctx, Request{Runtime: "fake", Name: "box"}); err != nil {
		t.Fatal(err)
	}
	if err := marks.SetPublic("box", 5173, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Delete(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	if _, ok := marks.PublicUntil("box", 5173, now); ok {
		t.Fatal("a deleted environment's port is still public")
	}
	// A mark that outlived its environment some other way.
	if err := marks.SetPublic("box", 8080, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Create(ctx, Request{Runtime: "fake", Name: "box"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := marks.PublicUntil("box", 8080, now); ok {
		t.Fatal("a new environment inherited an old one's public port")
	}
}
