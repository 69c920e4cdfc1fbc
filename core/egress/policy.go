// Package egress decides which hosts an environment without a network
// device may reach through its agent link: the allowlist rules, and the
// check of every address a name resolves to. Pure rules; the dialing is an
// adapter's.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one allowed destination: an exact name, a *.suffix wildcard, or
// an IP address; on one port, or (Port 0) on 443 and 80.
type Rule struct {
	Host     string // lower case, without the "*." of a wildcard
	Wildcard bool
	IP       netip.Addr // set when the rule names an address
	Port     int
}

func (r Rule) String() string {
	h := r.Host
	if r.Wildcard {
		h = "*." + h
	}
	if r.IP.IsValid() {
		h = r.IP.String()
		if r.IP.Is6() {
			h = "[" + h + "]"
		}
	}
	if r.Port != 0 {
		return h + ":" + strconv.Itoa(r.Port)
	}
	return h
}

// ErrBadRule is a rule that is not a host, *.suffix or address with an
// optional port.
var ErrBadRule = errors.New("not an allowed host")

// ParseRule reads "api.example.com", "*.example.com", "10.0.0.5:8443" or
// "[::1]:443", with an optional :port (1–65535).
func ParseRule(s string) (Rule, error) {
	orig := s
	s = strings.ToLower(strings.TrimSpace(s))
	var r Rule
	if a, err := netip.ParseAddrPort(s); err == nil {
		return Rule{IP: a.Addr().Unmap(), Port: int(a.Port())}, validPort(orig, int(a.Port()))
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return Rule{IP: a.Unmap()}, nil
	}
	host, port := s, ""
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host, port = s[:i], s[i+1:]
		p, err := strconv.Atoi(port)
		if err != nil {
			return Rule{}, fmt.Errorf("%w: %q (port)", ErrBadRule, orig)
		}
		if err := validPort(orig, p); err != nil {
			return Rule{}, err
		}
		r.Port = p
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		r.Wildcard, host = true, rest
	}
	if !validName(host) || (r.Wildcard && !strings.Contains(host, ".")) {
		return Rule{}, fmt.Errorf("%w: %q", ErrBadRule, orig)
	}
	r.Host = host
	return r, nil
}

func validPort(orig string, p int) error {
	if p < 1 || p > 65535 {
		return fmt.Errorf("%w: %q (port 1-65535)", ErrBadRule, orig)
	}
	return nil
}

// validName is a DNS name: labels of letters, digits and inner hyphens.
func validName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, l := range strings.Split(h, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// ParseRules reads a list of rules; the first bad one is the error.
func ParseRules(list []string) ([]Rule, error) {
	out := make([]Rule, 0, len(list))
	for _, s := range list {
		r, err := ParseRule(s)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func portMatches(rule, port int) bool {
	if rule == 0 {
		return port == 443 || port == 80
	}
	return rule == port
}

// matchName is the rule allowing name:port by name, if any.
func matchName(rules []Rule, name string, port int) (Rule, bool) {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	for _, r := range rules {
		if r.IP.IsValid() || !portMatches(r.Port, port) {
			continue
		}
		if (!r.Wildcard && name == r.Host) || (r.Wildcard && strings.HasSuffix(name, "."+r.Host)) {
			return r, true
		}
	}
	return Rule{}, false
}

// matchAddr is the rule allowing ip:port by address, if any.
func matchAddr(rules []Rule, ip netip.Addr, port int) (Rule, bool) {
	for _, r := range rules {
		if r.IP.IsValid() && r.IP == ip.Unmap() && portMatches(r.Port, port) {
			return r, true
		}
	}
	return Rule{}, false
}

// Internal reports addresses a name may not lead to unless allowed by
// address: loopback, private, link-local (cloud metadata lives there),
// unspecified, multicast, and the v6 forms of those.
func Internal(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() ||
		metadataV6.Contains(ip) || sharedSpace.Contains(ip)
}

var (
	// metadataV6 is the IMDS address of AWS over IPv6 (fd00:ec2::254 is in
	// the private fc00::/7 already; this keeps the intent explicit).
	metadataV6 = netip.MustParsePrefix("fd00:ec2::/32")
	// sharedSpace is carrier-grade NAT space (100.64.0.0/10): not the internet.
	sharedSpace = netip.MustParsePrefix("100.64.0.0/10")
)

// Decision is the answer for one destination.
type Decision struct {
	Allowed bool
	// Addr is where to dial when allowed (one of the resolved addresses).
	Addr netip.AddrPort
	// Rule is the rule that allowed it, or why not.
	Rule, Reason string
}

// Decide checks host:port against the rules; resolve gives a name's
// addresses (it is not called for an address or a refused name). A name
// must match a rule, and every address it resolves to must be public or
// itself allowed by address — one internal answer refuses the name (DNS
// rebinding would otherwise pick it).
func Decide(rules []Rule, host string, port int, resolve func(string) ([]netip.Addr, error)) Decision {
	if port < 1 || port > 65535 {
		return Decision{Reason: fmt.Sprintf("port %d", port)}
	}
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		if r, ok := matchAddr(rules, ip, port); ok {
			return Decision{Allowed: true, Addr: netip.AddrPortFrom(ip.Unmap(), uint16(port)), Rule: r.String()}
		}
		return Decision{Reason: fmt.Sprintf("%s:%d is an address no rule names", ip, port)}
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	r, ok := matchName(rules, host, port)
	if !ok {
		return Decision{Reason: fmt.Sprintf("%s:%d matches no allowed host", host, port)}
	}
	addrs, err := resolve(host)
	if err != nil || len(addrs) == 0 {
		return Decision{Reason: fmt.Sprintf("%s does not resolve: %v", host, err)}
	}
	for _, a := range addrs {
		if Internal(a) {
			if _, byAddr := matchAddr(rules, a, port); !byAddr {
				return Decision{Reason: fmt.Sprintf("%s resolves to %s, an internal address no rule names", host, a.Unmap())}
			}
		}
	}
	return Decision{Allowed: true, Addr: netip.AddrPortFrom(addrs[0].Unmap(), uint16(port)), Rule: r.String()}
}

// Within reports whether every rule of env is allowed by server (the
// server-wide list bounds each environment's); the first that is not is
// returned.
func Within(env, server []Rule) (Rule, bool) {
	for _, e := range env {
		if !coveredBy(e, server) {
			return e, false
		}
	}
	return Rule{}, true
}

func coveredBy(e Rule, server []Rule) bool {
	for _, s := range server {
		if s.Port != 0 && s.Port != e.Port {
			continue
		}
		if s.Port == 0 && e.Port != 0 && e.Port != 443 && e.Port != 80 {
			continue
		}
		switch {
		case e.IP.IsValid() || s.IP.IsValid():
			if e.IP == s.IP {
				return true
			}
		case !s.Wildcard:
			if !e.Wildcard && e.Host == s.Host {
				return true
			}
		default: // a server wildcard covers its subdomains and narrower wildcards
			if strings.HasSuffix(e.Host, "."+s.Host) || (e.Wildcard && e.Host == s.Host) {
				return true
			}
		}
	}
	return false
}
