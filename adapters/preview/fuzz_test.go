package preview

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzPreviewHost: whatever a Host header holds, the parser either refuses
// it or returns a port 1..65535 and a valid name that spell that host again.
func FuzzPreviewHost(f *testing.F) {
	for _, s := range []string{"5173-dev.localhost:8122", "1-a.b.localhost.", "65535-X_y-z.localhost", "0-dev.localhost", "5173-dev.localhost.evil", "[::1]:80", "5173-dev.preview.example.com:443"} {
		f.Add(s, "localhost")
	}
	f.Add("5173-dev.preview.example.com:443", "preview.example.com")
	f.Fuzz(func(t *testing.T, host, domain string) {
		domain = normalDomain(domain)
		p, ok := parsePreviewHost(host, domain)
		if !ok {
			return
		}
		if p.port < 1 || !validName(p.name) || p.name != strings.ToLower(p.name) {
			t.Fatalf("%q: port %d name %q", host, p.port, p.name)
		}
		if p.host != strings.ToLower(host) {
			t.Fatalf("%q: host %q", host, p.host)
		}
		again := strconv.Itoa(int(p.port)) + "-" + p.name + "." + domain
		if hostOnly(p.host) != again {
			t.Fatalf("%q parsed as %d %q, which spells %q", host, p.port, p.name, again)
		}
		if p.hostPort != "" && !validListenPort(p.hostPort) {
			t.Fatalf("%q: port %q", host, p.hostPort)
		}
		if q, ok := parsePreviewHost(p.host, domain); !ok || q != p {
			t.Fatalf("%q: not parsed the same again: %+v %+v", host, p, q)
		}
		id, port, err := parseDialHost(dialHost(p.name, p.port))
		if err != nil || id != p.name || port != p.port {
			t.Fatalf("dial host of %q: %q %d %v", host, id, port, err)
		}
	})
}
