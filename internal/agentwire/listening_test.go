package agentwire

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func TestListeningPortsRoundTrip(t *testing.T) {
	want := ports.ListeningPorts{Truncated: true, Ports: []ports.ListeningPort{
		{Port: 22, Address: "0.0.0.0", Family: ports.FamilyIPv4, Process: "sshd"},
		{Port: 22, Address: "::", Family: ports.FamilyIPv6, Process: "sshd"},
		{Port: 5173, Address: "127.0.0.1", Family: ports.FamilyIPv4},
		{Port: 5173, Address: "::1", Family: ports.FamilyIPv6, Process: "node"},
		{Port: 65535, Address: "::ffff:10.0.0.1", Family: ports.FamilyIPv6, Process: "a b"},
	}}
	// Through the wire bytes, as the link carries it.
	b, err := proto.Marshal(PortsReport(want))
	if err != nil {
		t.Fatal(err)
	}
	var r sandboxv1.PortsReport
	if err := proto.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	got, err := ListeningPorts(&r)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	// An empty list is a list (nothing listens), not an error.
	if got, err := ListeningPorts(PortsReport(ports.ListeningPorts{})); err != nil || len(got.Ports) != 0 || got.Truncated {
		t.Fatalf("empty: %+v %v", got, err)
	}
	// Sent in any order, kept sorted.
	shuffled := PortsReport(ports.ListeningPorts{Ports: []ports.ListeningPort{want.Ports[3], want.Ports[0], want.Ports[4], want.Ports[2], want.Ports[1]}})
	if got, err := ListeningPorts(shuffled); err != nil || !reflect.DeepEqual(got.Ports, want.Ports) {
		t.Fatalf("sorted: %+v %v", got.Ports, err)
	}
}

func TestListeningPortsRefusesBadReports(t *testing.T) {
	v4 := sandboxv1.AddressFamily_ADDRESS_FAMILY_IPV4
	v6 := sandboxv1.AddressFamily_ADDRESS_FAMILY_IPV6
	one := func(p *sandboxv1.ListeningPort) *sandboxv1.PortsReport {
		return &sandboxv1.PortsReport{Ports: []*sandboxv1.ListeningPort{p}}
	}
	tooMany := &sandboxv1.PortsReport{}
	for i := range ports.MaxListeningPorts + 1 {
		tooMany.Ports = append(tooMany.Ports, &sandboxv1.ListeningPort{Port: uint32(i + 1), Address: "0.0.0.0", Family: v4})
	}
	for name, r := range map[string]*sandboxv1.PortsReport{
		"too many":            tooMany,
		"port 0":              one(&sandboxv1.ListeningPort{Port: 0, Address: "0.0.0.0", Family: v4}),
		"port 65536":          one(&sandboxv1.ListeningPort{Port: 65536, Address: "0.0.0.0", Family: v4}),
		"no family":           one(&sandboxv1.ListeningPort{Port: 80, Address: "0.0.0.0"}),
		"unknown family":      one(&sandboxv1.ListeningPort{Port: 80, Address: "0.0.0.0", Family: 7}),
		"v6 address as ipv4":  one(&sandboxv1.ListeningPort{Port: 80, Address: "::1", Family: v4}),
		"v4 address as ipv6":  one(&sandboxv1.ListeningPort{Port: 80, Address: "127.0.0.1", Family: v6}),
		"not an address":      one(&sandboxv1.ListeningPort{Port: 80, Address: "localhost", Family: v4}),
		"empty address":       one(&sandboxv1.ListeningPort{Port: 80, Family: v4}),
		"zone":                one(&sandboxv1.ListeningPort{Port: 80, Address: "fe80::1%eth0", Family: v6}),
		"not canonical":       one(&sandboxv1.ListeningPort{Port: 80, Address: "0:0:0:0:0:0:0:1", Family: v6}),
		"long name":           one(&sandboxv1.ListeningPort{Port: 80, Address: "0.0.0.0", Family: v4, Process: strings.Repeat("n", ports.MaxProcessNameBytes+1)}),
		"control in name":     one(&sandboxv1.ListeningPort{Port: 80, Address: "0.0.0.0", Family: v4, Process: "a\x1b[2Jb"}),
		"same socket twice":   {Ports: []*sandboxv1.ListeningPort{{Port: 80, Address: "0.0.0.0", Family: v4, Process: "a"}, {Port: 80, Address: "0.0.0.0", Family: v4, Process: "b"}}},
		"nil entry is port 0": {Ports: []*sandboxv1.ListeningPort{nil}},
	} {
		if got, err := ListeningPorts(r); err == nil {
			t.Errorf("%s: accepted %+v", name, got)
		}
	}
	// The limits themselves pass.
	atLimit := &sandboxv1.PortsReport{Ports: tooMany.Ports[:ports.MaxListeningPorts]}
	atLimit.Ports = append(atLimit.Ports[:ports.MaxListeningPorts-1], &sandboxv1.ListeningPort{Port: 65535, Address: "::", Family: v6, Process: strings.Repeat("n", ports.MaxProcessNameBytes)})
	if _, err := ListeningPorts(atLimit); err != nil {
		t.Fatalf("at the limits: %v", err)
	}
}
