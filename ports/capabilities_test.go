package ports

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestCheckSpec(t *testing.T) {
	caps := RuntimeCapabilities{
		Runtime: "vmish", Isolation: KindVM, NetworkModes: []NetworkMode{NetworkNone, NetworkUser},
		Limits: []Limit{LimitCPUs, LimitDiskGB}, Images: true, Profiles: []string{"small"},
	}
	ok := EnvironmentSpec{Name: "env-1", Agent: AgentBootstrap{ID: "env-1", Secret: "s"}}
	tests := []struct {
		name   string
		mutate func(*EnvironmentSpec)
		want   string // "" = accepted, else a fragment of the error
	}{
		{"plain", func(*EnvironmentSpec) {}, ""},
		{"declared limits", func(s *EnvironmentSpec) { s.Resources = Resources{CPUs: 1.5, DiskGB: 4} }, ""},
		{"declared network", func(s *EnvironmentSpec) { s.Network = NetworkUser }, ""},
		{"image", func(s *EnvironmentSpec) { s.Image = "/img.qcow2" }, ""},
		{"known profile", func(s *EnvironmentSpec) { s.Profile = "small" }, ""},
		{"no agent id is fine", func(s *EnvironmentSpec) { s.Agent.ID = "" }, ""},
		{"empty name", func(s *EnvironmentSpec) { s.Name = "" }, "name"},
		{"name with slash", func(s *EnvironmentSpec) { s.Name, s.Agent.ID = "a/b", "" }, "name"},
		{"agent id differs", func(s *EnvironmentSpec) { s.Agent.ID = "other" }, "agent id"},
		{"no secret", func(s *EnvironmentSpec) { s.Agent.Secret = "" }, "secret"},
		{"undeclared network", func(s *EnvironmentSpec) { s.Network = NetworkHost }, "network"},
		{"undeclared limit pids", func(s *EnvironmentSpec) { s.Resources.PIDs = 10 }, "pids is not enforced"},
		{"undeclared limit memory", func(s *EnvironmentSpec) { s.Resources.MemoryMB = 10 }, "memory_mb is not enforced"},
		{"negative declared limit", func(s *EnvironmentSpec) { s.Resources.CPUs = -1 }, "negative"},
		{"negative undeclared limit", func(s *EnvironmentSpec) { s.Resources.PIDs = -1 }, "negative"},
		{"NaN cpus", func(s *EnvironmentSpec) { s.Resources.CPUs = math.NaN() }, "not a number"},
		{"Inf cpus", func(s *EnvironmentSpec) { s.Resources.CPUs = math.Inf(1) }, "not a number"},
		{"read-only root", func(s *EnvironmentSpec) { s.ReadOnlyRoot = true }, "read-only"},
		{"unknown profile", func(s *EnvironmentSpec) { s.Profile = "huge" }, "profile"},
		{"bad label", func(s *EnvironmentSpec) { s.Labels = map[string]string{"a=b": "c"} }, "label"},
		{"undeclared tier", func(s *EnvironmentSpec) { s.Tier = TierGVisor }, "offers no tier"},
		{"placement without a scheduler", func(s *EnvironmentSpec) { s.Placement.NodeSelector = map[string]string{"a": "b"} }, "no scheduler"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := ok
			tt.mutate(&spec)
			err := caps.CheckSpec(spec)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want ErrInvalidSpec mentioning %q", err, tt.want)
			}
		})
	}
	scheduled := RuntimeCapabilities{Runtime: "kube", NetworkModes: []NetworkMode{NetworkBridge}, Tiers: []string{TierGVisor}, Placement: true}
	for _, tt := range []struct {
		name string
		spec EnvironmentSpec
		want string
	}{
		{"declared tier", EnvironmentSpec{Tier: TierGVisor}, ""},
		{"unknown tier", EnvironmentSpec{Tier: "kata"}, "offers gvisor"},
		{"selector", EnvironmentSpec{Placement: Placement{NodeSelector: map[string]string{"kubernetes.io/arch": "amd64", "pool": ""}}}, ""},
		{"tolerations", EnvironmentSpec{Placement: Placement{Tolerations: []Toleration{{Key: "gpu", Value: "yes", Effect: "NoSchedule"}, {Operator: "Exists"}}}}, ""},
		{"bad selector key", EnvironmentSpec{Placement: Placement{NodeSelector: map[string]string{"a b": "c"}}}, "not a label key"},
		{"bad selector value", EnvironmentSpec{Placement: Placement{NodeSelector: map[string]string{"a": "c/d"}}}, "not a label value"},
		{"equal without key", EnvironmentSpec{Placement: Placement{Tolerations: []Toleration{{Value: "x"}}}}, "needs a key"},
		{"exists with value", EnvironmentSpec{Placement: Placement{Tolerations: []Toleration{{Key: "k", Operator: "Exists", Value: "x"}}}}, "takes no value"},
		{"bad operator", EnvironmentSpec{Placement: Placement{Tolerations: []Toleration{{Key: "k", Operator: "In"}}}}, "operator"},
		{"bad effect", EnvironmentSpec{Placement: Placement{Tolerations: []Toleration{{Key: "k", Effect: "Evict"}}}}, "effect"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			spec.Name, spec.Agent.Secret = "x", "s"
			err := scheduled.CheckSpec(spec)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want ErrInvalidSpec mentioning %q", err, tt.want)
			}
		})
	}
	noImages := RuntimeCapabilities{Runtime: "host", NetworkModes: []NetworkMode{NetworkHost}}
	if err := noImages.CheckSpec(EnvironmentSpec{Name: "x", Image: "alpine", Agent: AgentBootstrap{Secret: "s"}}); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("an image on a runtime without images: %v", err)
	}
}
