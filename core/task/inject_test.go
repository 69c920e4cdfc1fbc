package task

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/egress"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// envSecrets resolves env sources from a map.
type envSecrets map[string]string

func (m envSecrets) Resolve(_, key string) (string, bool, error) { v, ok := m[key]; return v, ok, nil }

const injectedManifest = `command: {argv: [claude]}
environment: {runtime: host}
lifecycle: {max_cost_usd: 0.01}
secrets:
  - {name: ANTHROPIC_API_KEY, source: env, inject: {host: api.anthropic.com, header: x-api-key}}
  - {name: PLAIN, source: env}
`

func injectService(t *testing.T, reg *inject.Registry, link *portsfake.Link, bound []egress.Rule) *Service {
	t.Helper()
	s := New(Config{Store: portsfake.NewTaskStore(), Workspace: &fakeWorkspace{}, Environments: &fakeEnvs{envs: map[string]environment.Environment{}},
		Files: fakeFiles{}, Link: link, Secrets: envSecrets{"ANTHROPIC_API_KEY": "sk-real", "PLAIN": "plain-value"},
		Clock: clock.Wall{}, IDs: &seq{}, DefaultRuntime: "host", Runtimes: []string{"host"}, Injected: reg, EgressBound: bound})
	t.Cleanup(s.Close)
	return s
}

func TestInjectedSecretsRefusedAtSubmit(t *testing.T) {
	for name, c := range map[string]struct {
		reg   *inject.Registry
		bound []string
		want  string
	}{
		"no registry":       {nil, nil, "secrets[0].inject: this server does not inject secrets"},
		"outside the bound": {inject.NewRegistry(nil), []string{"example.com"}, "secrets[0].inject.host: api.anthropic.com:443 is not among"},
	} {
		var bound []egress.Rule
		if c.bound != nil {
			bound, _ = egress.ParseRules(c.bound)
		}
		s := injectService(t, c.reg, portsfake.NewLink(), bound)
		if _, err := s.Submit(context.Background(), []byte(injectedManifest), ""); !errors.Is(err, ErrInvalidManifest) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", name, err)
		}
	}
	bound, _ := egress.ParseRules([]string{"*.anthropic.com"})
	if _, err := injectService(t, inject.NewRegistry(nil), portsfake.NewLink(), bound).Check([]byte(injectedManifest)); err != nil {
		t.Fatalf("inside the bound: %v", err)
	}
}

// The run gets a placeholder and the endpoint variable, never the value;
// the value waits in the registry under the run's agent until the run ends.
func TestARunGetsPlaceholdersAndTheBudgetEndsIt(t *testing.T) {
	reg := inject.NewRegistry(nil)
	link := portsfake.NewLink(portsfake.WithKill(func(c *portsfake.Command) { c.Finish(ports.CommandResult{ExitCode: 143, Signal: 15}) }))
	s := injectService(t, reg, link, nil)
	sub, err := s.Submit(context.Background(), []byte(injectedManifest), "")
	if err != nil {
		t.Fatal(err)
	}
	cmd := testkit.Receive(t, 15*time.Second, link.Started(), "the run")
	spec := link.Starts()[0].Spec
	ph := spec.Env["ANTHROPIC_API_KEY"]
	if !inject.IsPlaceholder(ph) || spec.Env["PLAIN"] != "plain-value" || spec.InjectEndpoints["ANTHROPIC_BASE_URL"] != "ANTHROPIC_API_KEY" {
		t.Fatalf("the run's env %v endpoints %v", spec.Env, spec.InjectEndpoints)
	}
	for k, v := range spec.Env {
		if strings.Contains(v, "sk-real") {
			t.Fatalf("the value is in the run's %s", k)
		}
	}
	agent := cmd.AgentID()
	req := inject.Request{Header: map[string][]string{"X-Api-Key": {ph}}}
	if a, ref := reg.Authorize(agent, "ANTHROPIC_API_KEY", req, time.Now()); ref != nil || a.HeaderValue != "sk-real" {
		t.Fatalf("the registry: %+v %v", a, ref)
	}
	if rec, _ := s.Get(sub.Task.ID); rec.Placeholders["ANTHROPIC_API_KEY"] != ph {
		t.Fatalf("the record keeps %v", rec.Placeholders)
	}
	// Usage past the budget ($0.015 of Sonnet output) ends the run.
	reg.AddBytes(agent, 12, 345)
	reg.Record(agent, inject.Response{Model: "claude-sonnet-4-5", OutputTokens: 1000})
	var rec ports.TaskRecord
	testkit.Eventually(t, 15*time.Second, "the task failed", func() bool {
		rec, _ = s.Get(sub.Task.ID)
		return State(rec.State).Terminal()
	})
	if rec.Reason != string(ReasonBudgetExhausted) || !strings.Contains(rec.Error, "max_cost_usd") || rec.Usage.OutputTokens != 1000 || rec.Usage.CostUSD <= 0.01 ||
		rec.Usage.BytesSent != 12 || rec.Usage.BytesReceived != 345 {
		t.Fatalf("ended %s %s %q usage %+v", rec.State, rec.Reason, rec.Error, rec.Usage)
	}
	// The run's end forgets the value.
	if _, ref := reg.Authorize(agent, "ANTHROPIC_API_KEY", req, time.Now()); ref == nil || ref.Code != inject.CodeGone {
		t.Fatalf("after the run: %v", ref)
	}
}

// A server restarted while a run goes on gives the run's secrets back under
// the placeholders the run holds, with the usage counted so far.
func TestARestartGivesTheRunItsSecretsBack(t *testing.T) {
	ph := inject.NewPlaceholder([]byte("0123456789abcdef01234567"))
	store := portsfake.NewTaskStore()
	now := time.Now()
	rec := ports.TaskRecord{ID: "t1", State: string(Running), Manifest: injectedManifest, CreatedAt: now,
		Phases: []ports.TaskPhase{{State: string(Running), At: now}}, Environment: ports.TaskEnvironment{Name: EnvironmentName("t1"), Runtime: "host"},
		AgentID: EnvironmentName("t1"), Workspace: "/w/workspace", CommandID: "task-t1",
		Placeholders: map[string]string{"ANTHROPIC_API_KEY": ph}, Usage: ports.TaskUsage{Requests: 3, InputTokens: 30, BytesSent: 300, BytesReceived: 3000}}
	_ = store.Put(context.Background(), rec)
	reg := inject.NewRegistry(nil)
	attached := make(chan *portsfake.Command, 1)
	link := portsfake.NewLink(portsfake.WithAttachScript(func(c *portsfake.Command) { attached <- c }))
	s := New(Config{Store: store, Workspace: &fakeWorkspace{}, Environments: &fakeEnvs{envs: map[string]environment.Environment{}},
		Files: fakeFiles{}, Link: link, Secrets: envSecrets{"ANTHROPIC_API_KEY": "sk-real", "PLAIN": "p"},
		Clock: clock.Wall{}, IDs: &seq{}, DefaultRuntime: "host", Injected: reg})
	t.Cleanup(s.Close)
	if err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Resume()
	cmd := testkit.Receive(t, 15*time.Second, attached, "the run bound again")
	req := inject.Request{Header: map[string][]string{"X-Api-Key": {ph}}}
	testkit.Eventually(t, 15*time.Second, "the secret given back", func() bool {
		a, ref := reg.Authorize(rec.AgentID, "ANTHROPIC_API_KEY", req, time.Now())
		return ref == nil && a.HeaderValue == "sk-real"
	})
	if u, _ := reg.Usage(rec.AgentID); u.Requests < 3 || u.InputTokens != 30 || u.BytesSent != 300 || u.BytesReceived != 3000 {
		t.Fatalf("usage %+v", u)
	}
	cmd.Exit(0)
	testkit.Eventually(t, 15*time.Second, "the task ended", func() bool { r, _ := s.Get("t1"); return State(r.State).Terminal() })
}
