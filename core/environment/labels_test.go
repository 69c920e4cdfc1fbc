package environment

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// A request's labels are kept with the environment, on the runtime too
// (under the internal ones), and a restarted server reads them back.
func TestLabelsAreKeptAndRecovered(t *testing.T) {
	f := newFixture(t, time.Minute)
	want := map[string]string{"team": "payments", "example.com/env": "dev"}
	e, err := f.svc.Create(context.Background(), Request{Runtime: "fake", Name: "pay", Labels: want, Tier: ""})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(e.Labels, want) {
		t.Fatalf("created with labels %v, want %v", e.Labels, want)
	}
	if got, _ := f.svc.Get("pay"); !maps.Equal(got.Labels, want) {
		t.Fatalf("Get: labels %v", got.Labels)
	}
	if spec := f.rt.specs["pay"]; spec.Labels["team"] != "payments" || spec.Labels["example.com/env"] != "dev" {
		t.Fatalf("the runtime was given labels %v", spec.Labels)
	}

	// A new server on the same runtime (with an internal label on it).
	rtEnv := f.rt.envs["pay"]
	rtEnv.Labels = maps.Clone(rtEnv.Labels)
	rtEnv.Labels[ports.LabelTier] = "gvisor"
	g := newFixture(t, time.Minute)
	g.rt.envs["pay"] = rtEnv
	g.svc.Recover(context.Background())
	if got, ok := g.svc.Get("pay"); !ok || !maps.Equal(got.Labels, want) {
		t.Fatalf("recovered: %v labels %v, want %v", ok, got.Labels, want)
	}
}

func TestLabelsRefused(t *testing.T) {
	f := newFixture(t, time.Minute)
	for _, labels := range []map[string]string{
		{ports.LabelPool: "p"},
		{"agentic-sandbox.anything": "x"},
		{"team": ""},
		{"-team": "x"},
		{"team": "a b"},
	} {
		if _, err := f.svc.Create(context.Background(), Request{Runtime: "fake", Name: "x", Labels: labels}); !errors.Is(err, ports.ErrInvalidSpec) {
			t.Errorf("labels %v: %v, want ErrInvalidSpec", labels, err)
		}
	}
	many := map[string]string{}
	for i := 0; i <= MaxLabels; i++ {
		many[string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	if err := CheckLabels(many); !errors.Is(err, ports.ErrInvalidSpec) {
		t.Errorf("%d labels: %v", len(many), err)
	}
	if len(f.rt.specs) != 0 || len(f.svc.Names()) != 0 {
		t.Fatalf("refused creates left %v %v", f.rt.specs, f.svc.Names())
	}
}

// A labelled request is provisioned, never given a pool's member (which
// carries no labels, and whose runtime would not keep them).
func TestLabelledRequestsAreNotTakenFromAPool(t *testing.T) {
	f := newPoolFixture(t, nil)
	if _, err := f.svc.PutPool(context.Background(), ports.Pool{Name: "p", Runtime: "fake", Size: 1}); err != nil {
		t.Fatal(err)
	}
	member := f.waitIdle(t, "p", 1).Members[0].Name
	e, err := f.svc.Create(context.Background(), Request{Runtime: "fake", Name: "labelled", Labels: map[string]string{"team": "payments"}})
	if err != nil || e.State != StateBooting || e.Labels["team"] != "payments" {
		t.Fatalf("create: %+v %v", e, err)
	}
	if !f.rt.has("labelled") || f.rt.specs["labelled"].Labels["team"] != "payments" {
		t.Fatal("the labelled environment was not provisioned with its labels")
	}
	if st, _ := f.svc.Pool("p"); st.Hits != 0 || st.Idle != 1 || st.Members[0].Name != member {
		t.Fatalf("the pool after a labelled create: %+v", st)
	}
}
