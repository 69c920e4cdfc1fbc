package main

import (
	"fmt"
	"io"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
)

// restURLFile is where the server leaves its REST API's URL in the data
// dir (beside operator-token), for agenticctl to find it.
const restURLFile = "rest-url"

// restURL is the REST API's base URL as a client on this machine reaches
// it: an unspecified listen address is reached on loopback.
func restURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip.To4() == nil {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// writeRESTURL replaces the data dir's rest-url with url.
func writeRESTURL(dataDir, url string) error {
	return fsatomic.WriteFile(filepath.Join(dataDir, restURLFile), []byte(url+"\n"), 0o644)
}

// bannerInfo is what the start-up banner shows.
type bannerInfo struct {
	Version, REST, WS, AgentRPC, DataDir, SecretsDir string
	// Token is printed when set (--print-token).
	Token string
	// Runtimes are those offered; Missing says, by runtime, why one wanted
	// is not (yet) and how to get it.
	Runtimes []string
	Missing  map[string]string
}

// writeBanner prints where everything is: the dashboard first, the API,
// the runtimes and how agenticctl finds this server.
func writeBanner(w io.Writer, b bannerInfo) {
	fmt.Fprintf(w, "agentic-mgmt %s\n", b.Version)
	fmt.Fprintf(w, "  dashboard: %s/ (sign in with the operator token)\n", b.REST)
	fmt.Fprintf(w, "  REST API:  %s/api/v1 (spec: /openapi.yaml)\n", b.REST)
	fmt.Fprintf(w, "  MCP:       %s/mcp (streamable HTTP with the operator token; agenticctl mcp on stdio)\n", b.REST)
	fmt.Fprintf(w, "  terminals: ws://%s/ws\n", b.WS)
	fmt.Fprintf(w, "  agent RPC: %s\n", b.AgentRPC)
	fmt.Fprintf(w, "  data dir:  %s\n", b.DataDir)
	fmt.Fprintf(w, "  runtimes:  %s\n", strings.Join(b.Runtimes, ", "))
	for _, name := range slices.Sorted(maps.Keys(b.Missing)) {
		fmt.Fprintf(w, "  %-10s not offered yet: %s\n", name+":", unmark(b.Missing[name]))
	}
	fmt.Fprintf(w, "  agenticctl: %s\n", cliHint(b.DataDir, b.SecretsDir))
	if b.Token != "" {
		fmt.Fprintf(w, "  operator token: %s\n", b.Token)
	} else {
		fmt.Fprintf(w, "  operator token: in %s/operator-token (or AGENTIC_OPERATOR_TOKEN)\n", b.DataDir)
	}
}

// cliHint says how agenticctl finds this server and its token: in the
// default data dir by itself, in a `.state` data dir (make run's) from the
// directory holding it and those below, else with SECRETS_DIR.
func cliHint(dataDir, secretsDir string) string {
	switch {
	case dataDir == filepath.Dir(filestore.DefaultSecretsDir()):
		return "finds this server and its token by itself (the default data dir)"
	case filepath.Base(dataDir) == ".state":
		return fmt.Sprintf("finds this server and its token when run in %s or below; elsewhere: export SECRETS_DIR=%s", filepath.Dir(dataDir), secretsDir)
	default:
		return fmt.Sprintf("export SECRETS_DIR=%s and it finds this server and its token", secretsDir)
	}
}

// bannerRuntimes are the runtimes offered now, and why each other one
// wanted is not.
func (r *Runtimes) bannerRuntimes() (offered []string, missing map[string]string) {
	offered = slices.Sorted(maps.Keys(r.snapshot()))
	missing = map[string]string{}
	for _, name := range r.wanted() {
		if !slices.Contains(offered, name) {
			missing[name] = r.unavailable(name)
		}
	}
	return offered, missing
}
