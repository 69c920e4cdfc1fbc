package environment

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/egress"
	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// mapSecrets resolves env references from a map (and no file).
type mapSecrets map[string]string

func (m mapSecrets) Resolve(source, key string) (string, bool, error) {
	if source != SecretFromEnv {
		return "", false, nil
	}
	v, ok := m[key]
	return v, ok, nil
}

func newSecretFixture(t *testing.T, rt *fakeRuntime, reg *inject.Registry, values mapSecrets, bound []egress.Rule) *Service {
	t.Helper()
	svc := New(Config{Runtimes: map[string]ports.Runtime{"fake": rt}, Agents: portsfake.NewDirectory(), Credentials: portsfake.NewCredentials(),
		Clock: clock.Wall{}, Bootstrap: ports.AgentBootstrap{Binary: "/bin/agent", ServerURL: "http://127.0.0.1:1", Socket: "/tmp/s"},
		ReadyTimeout: time.Minute, Injected: reg, Secrets: values, EgressBound: bound})
	t.Cleanup(svc.Close)
	return svc
}

var anthropicKey = SecretRequest{Name: "ANTHROPIC_API_KEY", Source: SecretFromEnv, Key: "REAL_KEY", Host: "api.anthropic.com", Header: "x-api-key"}

// authorize sends a request with the placeholder through the registry as
// env's workload would.
func authorize(reg *inject.Registry, env, placeholder string) *inject.Refusal {
	_, refusal := reg.Authorize(env, "ANTHROPIC_API_KEY", inject.Request{Path: "/v1/messages",
		Header: map[string][]string{"X-Api-Key": {placeholder}}}, time.Now())
	return refusal
}

// Create registers the values under the environment's name, its commands
// get the placeholder and endpoint, the runtime keeps the reference and
// placeholder (never the value), and Delete forgets them.
func TestInjectedSecretsAreRegisteredAtCreateAndForgottenAtDelete(t *testing.T) {
	rt, reg := newFakeRuntime(), inject.NewRegistry(nil)
	svc := newSecretFixture(t, rt, reg, mapSecrets{"REAL_KEY": "sk-real"}, nil)
	e, err := svc.Create(context.Background(), Request{Runtime: "fake", Name: "box", Secrets: []SecretRequest{anthropicKey}})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Secrets) != 1 || e.Secrets[0].Name != "ANTHROPIC_API_KEY" || e.Secrets[0].Spec.Address() != "api.anthropic.com:443" {
		t.Fatalf("environment's secrets %+v", e.Secrets)
	}
	env, endpoints := svc.InjectedEnv("box")
	ph := env["ANTHROPIC_API_KEY"]
	if !inject.IsPlaceholder(ph) || len(env) != 1 || endpoints["ANTHROPIC_BASE_URL"] != "ANTHROPIC_API_KEY" || len(endpoints) != 1 {
		t.Fatalf("commands get env %v, endpoints %v", env, endpoints)
	}
	if refusal := authorize(reg, "box", ph); refusal != nil {
		t.Fatalf("the registry refuses the environment's own placeholder: %v", refusal)
	}
	label := rt.specs["box"].Labels[ports.LabelInjected]
	if !strings.Contains(label, ph) || !strings.Contains(label, "REAL_KEY") || strings.Contains(label, "sk-real") {
		t.Fatalf("the runtime keeps %q", label)
	}
	if err := svc.Delete(context.Background(), "box"); err != nil {
		t.Fatal(err)
	}
	if refusal := authorize(reg, "box", ph); refusal == nil || refusal.Code != inject.CodeGone {
		t.Fatalf("after delete the placeholder is %+v, want %s", refusal, inject.CodeGone)
	}
	if env, _ := svc.InjectedEnv("box"); env != nil {
		t.Fatalf("a deleted environment's commands get %v", env)
	}
}

// What the environment's workloads sent through its injected secrets is
// its usage, from the first request the registry records until delete.
func TestInjectedUsageOfAnEnvironment(t *testing.T) {
	reg := inject.NewRegistry(nil)
	svc := newSecretFixture(t, newFakeRuntime(), reg, mapSecrets{"REAL_KEY": "sk-real"}, nil)
	if _, err := svc.Create(context.Background(), Request{Runtime: "fake", Name: "box", Secrets: []SecretRequest{anthropicKey}}); err != nil {
		t.Fatal(err)
	}
	if u, ok := svc.InjectedUsage("box"); ok {
		t.Fatalf("before any request the usage is %+v", u)
	}
	reg.Record("box", inject.Response{Model: "claude-x", InputTokens: 11, OutputTokens: 22})
	reg.AddBytes("box", 100, 200)
	reg.CountRequest("box")
	u, ok := svc.InjectedUsage("box")
	if !ok || u.Requests != 2 || u.InputTokens != 11 || u.OutputTokens != 22 || u.BytesSent != 100 || u.BytesReceived != 200 {
		t.Fatalf("after two requests the usage is %+v (%v)", u, ok)
	}
	if _, ok := svc.InjectedUsage("other"); ok {
		t.Fatal("an environment without injected secrets has usage")
	}
	if err := svc.Delete(context.Background(), "box"); err != nil {
		t.Fatal(err)
	}
	if u, ok := svc.InjectedUsage("box"); ok {
		t.Fatalf("a deleted environment's usage is %+v", u)
	}
}

// A restarted server gives the recovered environment its values back under
// the same placeholders; a value gone by then leaves the environment up
// and its requests refused.
func TestInjectedSecretsAreRestoredAfterARestart(t *testing.T) {
	rt := newFakeRuntime()
	first := newSecretFixture(t, rt, inject.NewRegistry(nil), mapSecrets{"REAL_KEY": "sk-real"}, nil)
	if _, err := first.Create(context.Background(), Request{Runtime: "fake", Name: "box", Secrets: []SecretRequest{anthropicKey}}); err != nil {
		t.Fatal(err)
	}
	before, _ := first.InjectedEnv("box")

	reg := inject.NewRegistry(nil)
	again := newSecretFixture(t, rt, reg, mapSecrets{"REAL_KEY": "sk-real"}, nil)
	again.Recover(context.Background())
	after, endpoints := again.InjectedEnv("box")
	if after["ANTHROPIC_API_KEY"] != before["ANTHROPIC_API_KEY"] || endpoints["ANTHROPIC_BASE_URL"] != "ANTHROPIC_API_KEY" {
		t.Fatalf("after the restart commands get %v %v, before %v", after, endpoints, before)
	}
	if refusal := authorize(reg, "box", after["ANTHROPIC_API_KEY"]); refusal != nil {
		t.Fatalf("the restored placeholder is refused: %v", refusal)
	}
	if got, ok := again.Get("box"); !ok || len(got.Secrets) != 1 {
		t.Fatalf("recovered environment %v secrets %+v", ok, got.Secrets)
	}

	// The value is gone at the next restart: the environment stays, its
	// commands keep the placeholder, its requests are refused.
	reg = inject.NewRegistry(nil)
	gone := newSecretFixture(t, rt, reg, mapSecrets{}, nil)
	gone.Recover(context.Background())
	e, ok := gone.Get("box")
	if !ok || e.State == StateFailed {
		t.Fatalf("without its value the environment is %v %q", ok, e.State)
	}
	if env, _ := gone.InjectedEnv("box"); env["ANTHROPIC_API_KEY"] != before["ANTHROPIC_API_KEY"] {
		t.Fatalf("commands get %v", env)
	}
	if refusal := authorize(reg, "box", before["ANTHROPIC_API_KEY"]); refusal == nil {
		t.Fatal("a secret whose value is gone still serves requests")
	}
}

// Bad secrets are refused before anything is provisioned, naming the field
// or the reference (never a value).
func TestInjectedSecretsRefused(t *testing.T) {
	rt := newFakeRuntime()
	bound, err := egress.ParseRules([]string{"api.anthropic.com"})
	if err != nil {
		t.Fatal(err)
	}
	svc := newSecretFixture(t, rt, inject.NewRegistry(nil), mapSecrets{"REAL_KEY": "sk-real"}, bound)
	other := anthropicKey
	other.Host = "api.openai.com"
	missing := anthropicKey
	missing.Key = "NO_SUCH_KEY"
	badHeader := anthropicKey
	badHeader.Header = "Host"
	twice := []SecretRequest{anthropicKey, anthropicKey}
	for _, c := range []struct {
		secrets []SecretRequest
		want    error
		says    string
	}{
		{[]SecretRequest{other}, ports.ErrInvalidSpec, "AGENTIC_EGRESS_ALLOWED_HOSTS"},
		{[]SecretRequest{missing}, ErrSecretUnresolved, "NO_SUCH_KEY"},
		{[]SecretRequest{badHeader}, ports.ErrInvalidSpec, "secrets[0].inject.header"},
		{twice, ports.ErrInvalidSpec, "given twice"},
		{[]SecretRequest{{Name: "K", Source: "vault", Host: "api.anthropic.com", Header: "x-api-key"}}, ports.ErrInvalidSpec, "env or file"},
		{[]SecretRequest{{Name: "K", Source: SecretFromFile, Key: "../x", Host: "api.anthropic.com", Header: "x-api-key"}}, ports.ErrInvalidSpec, "without .."},
	} {
		_, err := svc.Create(context.Background(), Request{Runtime: "fake", Name: "box", Secrets: c.secrets})
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), "sk-real") {
			t.Errorf("%+v: %v, want %v saying %q", c.secrets, err, c.want, c.says)
		}
		if _, ok := svc.Get("box"); ok || rt.has("box") {
			t.Fatalf("%+v: refused but kept", c.secrets)
		}
	}
	// A server that injects nothing refuses them all.
	plain := newSecretFixture(t, newFakeRuntime(), nil, nil, nil)
	if _, err := plain.Create(context.Background(), Request{Runtime: "fake", Name: "box", Secrets: []SecretRequest{anthropicKey}}); !errors.Is(err, ports.ErrInvalidSpec) {
		t.Fatalf("a server without injection: %v", err)
	}
}
