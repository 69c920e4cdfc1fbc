package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
)

// The banner starts with the dashboard, lists the runtimes with why a
// wanted one is missing, and says how agenticctl finds the server.
func TestBannerShowsTheDashboardRuntimesAndTheCLI(t *testing.T) {
	var b strings.Builder
	writeBanner(&b, bannerInfo{Version: "v1", REST: "http://127.0.0.1:8122", WS: "127.0.0.1:8121", AgentRPC: "http://127.0.0.1:8120",
		DataDir: "/src/clone/.state", SecretsDir: "/src/clone/.state/secrets", Token: "tok",
		Runtimes: []string{"host"}, Missing: map[string]string{"docker": "docker does not answer: make docker"}})
	for _, want := range []string{
		"  dashboard: http://127.0.0.1:8122/ (sign in with the operator token)\n",
		"  REST API:  http://127.0.0.1:8122/api/v1",
		"  MCP:       http://127.0.0.1:8122/mcp",
		"  runtimes:  host\n",
		"  docker:    not offered yet: docker does not answer: make docker\n",
		"  agenticctl: finds this server and its token when run in /src/clone or below; elsewhere: export SECRETS_DIR=/src/clone/.state/secrets\n",
		"  operator token: tok\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Index(b.String(), "dashboard:") > strings.Index(b.String(), "REST API:") {
		t.Errorf("the dashboard comes first:\n%s", b.String())
	}
	def := filestore.DefaultSecretsDir()
	if h := cliHint(filepath.Dir(def), def); !strings.Contains(h, "by itself") {
		t.Errorf("default data dir: %q", h)
	}
	if h := cliHint("/srv/a", "/srv/a/secrets"); !strings.Contains(h, "export SECRETS_DIR=/srv/a/secrets") {
		t.Errorf("another data dir: %q", h)
	}
}

func TestRESTURLReachesAnUnspecifiedAddressOnLoopback(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:8122": "http://127.0.0.1:8122",
		"0.0.0.0:8122":   "http://127.0.0.1:8122",
		"[::]:8122":      "http://[::1]:8122",
		"[::1]:8122":     "http://[::1]:8122",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := restURL(a); got != want {
			t.Errorf("%s: %s, want %s", addr, got, want)
		}
	}
}
