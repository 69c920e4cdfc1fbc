package task

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

const tieredManifest = `
command: {argv: [true]}
environment:
  runtime: kubernetes
  isolation: gvisor
  placement:
    node_selector: {pool: gpu, kubernetes.io/arch: amd64}
    tolerations:
      - {key: gpu, operator: Equal, value: "yes", effect: NoSchedule}
      - {operator: Exists}
`

var tieredPlacement = ports.Placement{NodeSelector: map[string]string{"pool": "gpu", "kubernetes.io/arch": "amd64"},
	Tolerations: []ports.Toleration{{Key: "gpu", Operator: "Equal", Value: "yes", Effect: "NoSchedule"}, {Operator: "Exists"}}}

// A manifest's environment names an isolation tier and a placement as a
// create request does; a malformed one is refused with its path.
func TestManifestIsolationAndPlacement(t *testing.T) {
	m, err := Parse([]byte(tieredManifest))
	if err != nil {
		t.Fatal(err)
	}
	if m.Environment.Isolation != ports.TierGVisor || !m.Environment.Placement.Equal(tieredPlacement) {
		t.Fatalf("parsed isolation %q placement %+v", m.Environment.Isolation, m.Environment.Placement)
	}
	for _, c := range []struct{ doc, path string }{
		{`{command: {argv: [true]}, environment: {isolation: "G Visor"}}`, "environment.isolation: must be a tier's name"},
		{`{command: {argv: [true]}, environment: {isolation: [gvisor]}}`, "environment.isolation: must be a string"},
		{`{command: {argv: [true]}, environment: {placement: {affinity: x}}}`, "environment.placement.affinity: unknown field"},
		{`{command: {argv: [true]}, environment: {placement: {node_selector: [a]}}}`, "environment.placement.node_selector: must be a mapping"},
		{`{command: {argv: [true]}, environment: {placement: {node_selector: {"a b": c}}}}`, `environment.placement: node selector key "a b" is not a label key`},
		{`{command: {argv: [true]}, environment: {placement: {node_selector: {a: b, a: c}}}}`, "environment.placement.node_selector.a: given twice"},
		{`{command: {argv: [true]}, environment: {placement: {tolerations: {key: a}}}}`, "environment.placement.tolerations: must be a list"},
		{`{command: {argv: [true]}, environment: {placement: {tolerations: [{key: a, when: now}]}}}`, "environment.placement.tolerations[0].when: unknown field"},
		{`{command: {argv: [true]}, environment: {placement: {tolerations: [{key: a, operator: Exists, value: b}]}}}`, "takes no value"},
		{`{command: {argv: [true]}, environment: {placement: {tolerations: [{key: a, effect: Evict}]}}}`, "toleration effect"},
	} {
		_, err := Parse([]byte(c.doc))
		if !errors.Is(err, ErrInvalidManifest) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("%s: %v, want ErrInvalidManifest saying %q", c.doc, err, c.path)
		}
	}
}

// The task's environment is requested with the manifest's tier and
// placement (whether its runtime offers them is the environments use
// case's to say, as for any create).
func TestATaskRequestsItsEnvironmentsTierAndPlacement(t *testing.T) {
	envs := &fakeEnvs{envs: map[string]environment.Environment{}}
	s := New(Config{Store: portsfake.NewTaskStore(), Workspace: &fakeWorkspace{}, Environments: envs,
		Files: fakeFiles{}, Link: portsfake.NewLink(), Secrets: noSecrets{}, Clock: clock.Wall{}, IDs: &seq{}, DefaultRuntime: "host",
		Runtimes: []string{"host", "kubernetes"}})
	t.Cleanup(s.Close)
	if _, err := s.Submit(context.Background(), []byte(tieredManifest), ""); err != nil {
		t.Fatal(err)
	}
	var req environment.Request
	testkit.Eventually(t, 15*time.Second, "the task's environment was not requested", func() bool {
		envs.mu.Lock()
		defer envs.mu.Unlock()
		if len(envs.requests) == 0 {
			return false
		}
		req = envs.requests[0]
		return true
	})
	if req.Runtime != "kubernetes" || req.Tier != ports.TierGVisor || !req.Placement.Equal(tieredPlacement) {
		t.Fatalf("requested runtime %q tier %q placement %+v", req.Runtime, req.Tier, req.Placement)
	}
}
