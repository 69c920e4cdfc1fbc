package wakeful

import (
	"context"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// oneRuntime provisions environments that exist at once (what a benchmark
// of the environment use case's Touch needs, nothing more).
type oneRuntime struct{ ports.Runtime }

func (oneRuntime) Capabilities() ports.RuntimeCapabilities {
	return ports.RuntimeCapabilities{Runtime: "bench", Hibernate: ports.HibernateMemory}
}
func (oneRuntime) Ping(context.Context) error { return nil }
func (oneRuntime) Provision(_ context.Context, spec ports.EnvironmentSpec) (ports.Environment, error) {
	return ports.Environment{Name: spec.Name, RuntimeID: "rt-" + spec.Name, State: ports.EnvRunning}, nil
}
func (oneRuntime) Inspect(_ context.Context, name string) (ports.Environment, error) {
	return ports.Environment{Name: name, RuntimeID: "rt-" + name, State: ports.EnvRunning}, nil
}
func (oneRuntime) List(context.Context) ([]ports.Environment, error)    { return nil, nil }
func (oneRuntime) Recover(context.Context) ([]ports.Environment, error) { return nil, nil }

// BenchmarkSessionOutput is what the decorator adds to each chunk of a
// kept session's output on its way from the link to the session use case:
// nothing (bare), or a Touch of the environment use case, for an
// environment's agent and for an agent that is no environment's (a host
// agent).
func BenchmarkSessionOutput(b *testing.B) {
	envs := environment.New(environment.Config{Runtimes: map[string]ports.Runtime{"bench": oneRuntime{}},
		Agents: portsfake.NewDirectory(), Credentials: portsfake.NewCredentials(), Clock: clock.Wall{},
		Bootstrap: ports.AgentBootstrap{Binary: "/bin/agent", ServerURL: "http://127.0.0.1:1", Socket: "/tmp/s"}})
	b.Cleanup(envs.Close)
	if _, err := envs.Create(context.Background(), environment.Request{Runtime: "bench", Name: "box"}); err != nil {
		b.Fatal(err)
	}
	chunk := ports.OutputChunk{Stream: ports.StreamPTY, Data: make([]byte, 4<<10)}
	var sink int
	out := func(c ports.OutputChunk) { sink += len(c.Data) }
	for _, c := range []struct {
		name string
		out  func(ports.OutputChunk)
	}{
		{"bare", out},
		{"touch-environment", touching(envs, "box", ports.UseSession, out)},
		{"touch-host-agent", touching(envs, "host-1", ports.UseSession, out)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.out(chunk)
			}
		})
	}
	_ = sink
}
