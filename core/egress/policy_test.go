package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func rules(t *testing.T, list ...string) []Rule {
	t.Helper()
	r, err := ParseRules(list)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParseRule(t *testing.T) {
	for in, want := range map[string]string{
		"api.anthropic.com":     "api.anthropic.com",
		"API.Anthropic.com":     "api.anthropic.com",
		"*.npmjs.org":           "*.npmjs.org",
		"proxy.golang.org:8443": "proxy.golang.org:8443",
		"10.0.0.5":              "10.0.0.5",
		"127.0.0.1:8443":        "127.0.0.1:8443",
		"[::1]:443":             "[::1]:443",
		"::1":                   "[::1]",
		"registry-1.docker.io":  "registry-1.docker.io",
	} {
		r, err := ParseRule(in)
		if err != nil || r.String() != want {
			t.Errorf("%q: %v %v, want %s", in, r, err, want)
		}
	}
	for _, bad := range []string{"", "*", "*.com", "a..b", "-a.com", "a-.com", "a.com:0", "a.com:70000", "a.com:x",
		"http://a.com", "a.com/path", "a_b.com", "*.*.a.com", "a.com:", strings.Repeat("a", 64) + ".com"} {
		if _, err := ParseRule(bad); !errors.Is(err, ErrBadRule) {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestDecide(t *testing.T) {
	rs := rules(t, "api.anthropic.com", "*.npmjs.org", "git.example.com:22", "test.local:8443", "127.0.0.1:8443", "203.0.113.9:443")
	dns := map[string][]string{
		"api.anthropic.com":  {"160.79.104.10"},
		"registry.npmjs.org": {"104.16.1.1", "104.16.2.2"},
		"npmjs.org":          {"104.16.1.1"},
		"git.example.com":    {"198.51.100.7"},
		"test.local":         {"127.0.0.1"},
		"evil.npmjs.org":     {"104.16.1.1", "169.254.169.254"},
		"meta.npmjs.org":     {"fd00:ec2::254"},
	}
	resolve := func(h string) ([]netip.Addr, error) {
		var out []netip.Addr
		for _, a := range dns[strings.ToLower(h)] {
			out = append(out, netip.MustParseAddr(a))
		}
		if out == nil {
			return nil, errors.New("no such host")
		}
		return out, nil
	}
	for _, c := range []struct {
		host    string
		port    int
		allowed bool
		addr    string
		why     string
	}{
		{"api.anthropic.com", 443, true, "160.79.104.10:443", ""},
		{"API.anthropic.com.", 80, true, "160.79.104.10:80", ""},
		{"api.anthropic.com", 8443, false, "", "matches no allowed host"},
		{"registry.npmjs.org", 443, true, "104.16.1.1:443", ""},
		{"npmjs.org", 443, false, "", "matches no allowed host"}, // a wildcard is subdomains only
		{"git.example.com", 22, true, "198.51.100.7:22", ""},
		{"git.example.com", 443, false, "", "matches no allowed host"},
		{"test.local", 8443, true, "127.0.0.1:8443", ""}, // loopback, allowed by address
		{"evil.npmjs.org", 443, false, "", "internal address"},
		{"meta.npmjs.org", 443, false, "", "internal address"},
		{"other.com", 443, false, "", "matches no allowed host"},
		{"127.0.0.1", 8443, true, "127.0.0.1:8443", ""},
		{"127.0.0.1", 443, false, "", "no rule names"},
		{"203.0.113.9", 443, true, "203.0.113.9:443", ""},
		{"169.254.169.254", 80, false, "", "no rule names"},
		{"[::1]", 8443, false, "", "no rule names"},
		{"nx.npmjs.org", 443, false, "", "does not resolve"},
		{"api.anthropic.com", 0, false, "", "port"},
	} {
		d := Decide(rs, c.host, c.port, resolve)
		if d.Allowed != c.allowed || (c.allowed && d.Addr.String() != c.addr) || (!c.allowed && !strings.Contains(d.Reason, c.why)) {
			t.Errorf("%s:%d: %+v", c.host, c.port, d)
		}
	}
}

func TestInternal(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "0.0.0.0", "::1", "fe80::1", "fc00::1", "::ffff:127.0.0.1", "100.64.0.1", "224.0.0.1"} {
		if !Internal(netip.MustParseAddr(a)) {
			t.Errorf("%s is not internal", a)
		}
	}
	for _, a := range []string{"8.8.8.8", "160.79.104.10", "2606:4700::1111"} {
		if Internal(netip.MustParseAddr(a)) {
			t.Errorf("%s is internal", a)
		}
	}
}

func TestWithin(t *testing.T) {
	server := rules(t, "*.example.com", "api.anthropic.com", "10.0.0.5:8443")
	for list, ok := range map[string]bool{
		"a.example.com":           true,
		"*.b.example.com":         true,
		"*.example.com":           true,
		"example.com":             false,
		"api.anthropic.com:443":   true,
		"api.anthropic.com:8443":  false,
		"10.0.0.5:8443":           true,
		"10.0.0.5:443":            false,
		"a.example.com,other.org": false,
	} {
		_, got := Within(rules(t, strings.Split(list, ",")...), server)
		if got != ok {
			t.Errorf("%s within: %v, want %v", list, got, ok)
		}
	}
}

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"a.com", "*.a.com:443", "[::1]:80", "1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		again, err := ParseRule(r.String())
		if err != nil || again != r {
			t.Fatalf("%q → %v → %v %v", s, r, again, err)
		}
	})
}
