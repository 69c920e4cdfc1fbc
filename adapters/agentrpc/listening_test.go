package agentrpc

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"connectrpc.com/connect"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/changes"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func portsReport(ps ...*sandboxv1.ListeningPort) *sandboxv1.ConnectRequest {
	return &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_PortsReport{PortsReport: &sandboxv1.PortsReport{Ports: ps}}}
}

// waitKinds waits until w has heard of kind.
func waitKinds(t *testing.T, w *changes.Watcher, kind ports.ChangeKind) {
	t.Helper()
	var got ports.ChangeKind
	testkit.Eventually(t, waitTimeout, "change "+strings.Join(changes.Names(kind), ","), func() bool {
		got |= w.Take()
		return got&kind != 0
	})
}

func TestListeningPortsAreKeptPerAgent(t *testing.T) {
	hub := changes.NewHub()
	w, stop := hub.Watch()
	defer stop()
	h := newHarness(t, func(c *Config) { c.Changes = hub })
	a := h.connectAgent("agent-a")
	b := h.connectAgent("agent-b")
	if got := h.svc.ListeningPorts("agent-a"); len(got.Ports) != 0 || !got.UpdatedAt.IsZero() {
		t.Fatalf("before any report: %+v", got)
	}
	v4, v6 := sandboxv1.AddressFamily_ADDRESS_FAMILY_IPV4, sandboxv1.AddressFamily_ADDRESS_FAMILY_IPV6
	w.Take()
	a.send(portsReport(
		&sandboxv1.ListeningPort{Port: 5173, Address: "::1", Family: v6, Process: "node"},
		&sandboxv1.ListeningPort{Port: 22, Address: "0.0.0.0", Family: v4, Process: "sshd"},
	))
	a.barrier()
	want := ports.ListeningPorts{Ports: []ports.ListeningPort{
		{Port: 22, Address: "0.0.0.0", Family: ports.FamilyIPv4, Process: "sshd"},
		{Port: 5173, Address: "::1", Family: ports.FamilyIPv6, Process: "node"},
	}}
	got := h.svc.ListeningPorts("agent-a")
	want.UpdatedAt = got.UpdatedAt // the fake clock's now, as the report was handled
	if !reflect.DeepEqual(got, want) || got.UpdatedAt.IsZero() || got.UpdatedAt.After(h.clock.Now()) {
		t.Fatalf("agent-a's ports:\n got %+v\nwant %+v", got, want)
	}
	waitKinds(t, w, ports.ChangePorts)
	if got := h.svc.ListeningPorts("agent-b"); len(got.Ports) != 0 {
		t.Fatalf("agent-b has agent-a's ports: %+v", got)
	}
	// A report replaces the list; an empty one empties it.
	a.send(portsReport())
	a.barrier()
	if got := h.svc.ListeningPorts("agent-a"); len(got.Ports) != 0 || got.UpdatedAt.IsZero() {
		t.Fatalf("after an empty report: %+v", got)
	}
	waitKinds(t, w, ports.ChangePorts)
	// Gone with the connection.
	b.send(portsReport(&sandboxv1.ListeningPort{Port: 80, Address: "::", Family: v6}))
	b.barrier()
	w.Take()
	b.hangUp()
	eventually(t, "agent-b's list dropped", func() bool { return h.svc.ListeningPorts("agent-b").UpdatedAt.IsZero() })
	waitKinds(t, w, ports.ChangePorts)
	if got := h.svc.ListeningPorts("nobody"); len(got.Ports) != 0 || !got.UpdatedAt.IsZero() {
		t.Fatalf("an unknown agent: %+v", got)
	}
}

// An agent is untrusted: a report beyond the link's limits ends its stream
// with INVALID_ARGUMENT and is not kept.
func TestBadPortsReportsAreRefused(t *testing.T) {
	h := newHarness(t)
	v4 := sandboxv1.AddressFamily_ADDRESS_FAMILY_IPV4
	tooMany := make([]*sandboxv1.ListeningPort, ports.MaxListeningPorts+1)
	for i := range tooMany {
		tooMany[i] = &sandboxv1.ListeningPort{Port: uint32(i + 1), Address: "0.0.0.0", Family: v4}
	}
	for name, report := range map[string]*sandboxv1.ConnectRequest{
		"too many ports":  portsReport(tooMany...),
		"port 0":          portsReport(&sandboxv1.ListeningPort{Port: 0, Address: "0.0.0.0", Family: v4}),
		"port 70000":      portsReport(&sandboxv1.ListeningPort{Port: 70000, Address: "0.0.0.0", Family: v4}),
		"bad address":     portsReport(&sandboxv1.ListeningPort{Port: 80, Address: "example.com", Family: v4}),
		"wrong family":    portsReport(&sandboxv1.ListeningPort{Port: 80, Address: "::", Family: v4}),
		"long name":       portsReport(&sandboxv1.ListeningPort{Port: 80, Address: "0.0.0.0", Family: v4, Process: strings.Repeat("x", 65)}),
		"control in name": portsReport(&sandboxv1.ListeningPort{Port: 80, Address: "0.0.0.0", Family: v4, Process: "x\ny"}),
	} {
		t.Run(name, func(t *testing.T) {
			a := h.connectAgent("agent-a")
			a.send(report)
			err := a.waitClosed()
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
				t.Fatalf("stream ended with %v, want invalid_argument", err)
			}
			if got := h.svc.ListeningPorts("agent-a"); len(got.Ports) != 0 {
				t.Fatalf("kept %+v", got)
			}
		})
	}
}
