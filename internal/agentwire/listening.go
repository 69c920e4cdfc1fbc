package agentwire

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"unicode"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

var familyWire = map[ports.AddressFamily]sandboxv1.AddressFamily{
	ports.FamilyIPv4: sandboxv1.AddressFamily_ADDRESS_FAMILY_IPV4,
	ports.FamilyIPv6: sandboxv1.AddressFamily_ADDRESS_FAMILY_IPV6,
}

// PortsReport is l as the agent sends it (UpdatedAt is the server's).
func PortsReport(l ports.ListeningPorts) *sandboxv1.PortsReport {
	r := &sandboxv1.PortsReport{Truncated: l.Truncated, Ports: make([]*sandboxv1.ListeningPort, 0, len(l.Ports))}
	for _, p := range l.Ports {
		r.Ports = append(r.Ports, &sandboxv1.ListeningPort{
			Port: uint32(p.Port), Address: p.Address, Family: familyWire[p.Family], Process: p.Process,
		})
	}
	return r
}

// ListeningPorts is the inverse of PortsReport, for the server: an agent
// is untrusted, so a report that breaks the link's limits is refused
// whole (more than ports.MaxListeningPorts, a port outside 1..65535, an
// unknown family, an address that is not a canonical one of its family, a
// process name over ports.MaxProcessNameBytes or with control characters,
// the same socket twice). The list comes back sorted by port, family and
// address.
func ListeningPorts(r *sandboxv1.PortsReport) (ports.ListeningPorts, error) {
	in := r.GetPorts()
	if len(in) > ports.MaxListeningPorts {
		return ports.ListeningPorts{}, fmt.Errorf("%d listening ports: at most %d", len(in), ports.MaxListeningPorts)
	}
	out := ports.ListeningPorts{Truncated: r.GetTruncated(), Ports: make([]ports.ListeningPort, 0, len(in))}
	for i, p := range in {
		lp, err := listeningPort(p)
		if err != nil {
			return ports.ListeningPorts{}, fmt.Errorf("listening port %d: %w", i, err)
		}
		out.Ports = append(out.Ports, lp)
	}
	SortListeningPorts(out.Ports)
	for i := 1; i < len(out.Ports); i++ {
		if sameSocket(out.Ports[i], out.Ports[i-1]) {
			return ports.ListeningPorts{}, fmt.Errorf("listening port %d/%s %s reported twice", out.Ports[i].Port, out.Ports[i].Family, out.Ports[i].Address)
		}
	}
	return out, nil
}

func sameSocket(a, b ports.ListeningPort) bool {
	return a.Port == b.Port && a.Family == b.Family && a.Address == b.Address
}

func listeningPort(p *sandboxv1.ListeningPort) (ports.ListeningPort, error) {
	if p.GetPort() < 1 || p.GetPort() > 65535 {
		return ports.ListeningPort{}, fmt.Errorf("port %d outside 1..65535", p.GetPort())
	}
	family := keyOf(familyWire, p.GetFamily(), "")
	if family == "" {
		return ports.ListeningPort{}, fmt.Errorf("unknown address family %v", p.GetFamily())
	}
	if len(p.GetAddress()) > 64 {
		return ports.ListeningPort{}, errors.New("address too long")
	}
	addr, err := netip.ParseAddr(p.GetAddress())
	if err != nil || addr.Zone() != "" || addr.String() != p.GetAddress() {
		return ports.ListeningPort{}, fmt.Errorf("address %q is not a canonical IP address", p.GetAddress())
	}
	if (family == ports.FamilyIPv4) != addr.Is4() {
		return ports.ListeningPort{}, fmt.Errorf("address %s is not %s", addr, family)
	}
	name := p.GetProcess()
	if len(name) > ports.MaxProcessNameBytes {
		return ports.ListeningPort{}, fmt.Errorf("process name of %d bytes: at most %d", len(name), ports.MaxProcessNameBytes)
	}
	if strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return ports.ListeningPort{}, errors.New("process name with a control character")
	}
	return ports.ListeningPort{Port: uint16(p.GetPort()), Address: p.GetAddress(), Family: family, Process: name}, nil //nolint:gosec // checked to be 1..65535 above
}

// SortListeningPorts orders ps by port, then family (ipv4 first), then
// address, then process.
func SortListeningPorts(ps []ports.ListeningPort) {
	slices.SortFunc(ps, func(a, b ports.ListeningPort) int {
		if a.Port != b.Port {
			return int(a.Port) - int(b.Port)
		}
		if c := strings.Compare(string(a.Family), string(b.Family)); c != 0 {
			return c
		}
		if c := strings.Compare(a.Address, b.Address); c != 0 {
			return c
		}
		return strings.Compare(a.Process, b.Process)
	})
}
