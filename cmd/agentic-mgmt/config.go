package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/envfile"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/gitwork"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/tlsca"
	"github.com/agentic-sandbox/agentic-sandbox/core/egress"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/core/inject"
	"github.com/agentic-sandbox/agentic-sandbox/internal/telemetry"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Config is agentic-mgmt's configuration: flags override the environment,
// which overrides /etc/agentic-sandbox/management.env.
type Config struct {
	ListenAddr      string
	AdvertiseHost   string
	SecretsDir      string
	DataDir         string
	HostAgents      int
	OperatorToken   string
	AgentBinary     string
	AIWGEndpoint    string
	AIWGName        string
	PrintToken      bool
	DisconnectGrace time.Duration
	// ViewerStallTimeout is how long a terminal viewer may leave its
	// stream unread before it is disconnected (it can rejoin from its offset).
	ViewerStallTimeout time.Duration
	// MissionRetention is how long finished missions stay in missions.json.
	MissionRetention time.Duration
	Version          string
	// Runtimes lists the runtimes asked for (AGENTIC_RUNTIMES); nil means
	// those the catalog finds on this machine (runtimeEntry.Found).
	Runtimes []string
	// RuntimeOptions are each catalog runtime's settings as read and
	// checked, by runtime name (the typed options of its runtimeDef).
	RuntimeOptions map[string]any
	// AgentSocket is a unix socket where the agent link also listens, for
	// environments without a network (mounted into containers, relayed from VMs).
	AgentSocket string
	// HostUser is the one user every host agent's commands run as; "" gives
	// each host agent users of its own (a root server) or runs them as
	// this server's user.
	HostUser string
	// HostUIDs is the uid range host agents' users come from (FIRST-LAST).
	HostUIDs string
	// SessionRetention is how long ended sessions and their logs are kept.
	SessionRetention time.Duration
	// FileMaxBytes is the largest file or archive moved to or from an agent.
	FileMaxBytes int64
	// HibernateMaxBytes bounds the disk the saved states of hibernated
	// environments take together (AGENTIC_HIBERNATE_MAX_BYTES; 0: none).
	HibernateMaxBytes int64
	// WakeTimeout bounds a hibernation and a wake (AGENTIC_WAKE_TIMEOUT).
	WakeTimeout time.Duration
	// TaskRuntime runs tasks whose manifest names no runtime ("": the
	// catalog's choice, defaultTaskRuntime).
	TaskRuntime string
	// TaskRepoDirs are directories (symbolic links resolved) whose local
	// repositories a root server reads itself; others it reads as nobody.
	TaskRepoDirs []string
	// TaskHold is a test hook: how long a task waits on entering each
	// state (AGENTIC_TEST_TASK_HOLD=staging=30s,completing=30s).
	TaskHold map[string]time.Duration
	// AgentTLS is "off", "auto" (a CA and server certificate made in
	// <data dir>/tls/) or "CERT.pem:KEY.pem".
	AgentTLS string
	// OperatorHost is where REST and the client WebSocket listen; "" is
	// LISTEN_ADDR's host.
	OperatorHost string
	// AllowedNetworks are the network modes callers may ask for containers
	// and VMs (host environments always share the host's network).
	AllowedNetworks []ports.NetworkMode
	// EgressBound is the server-wide allowlist (AGENTIC_EGRESS_ALLOWED_HOSTS)
	// every proxy environment's allowed hosts must fall within; nil: none.
	EgressBound []egress.Rule
	// Pools are warm pools of the runtimes' default spec kept from the
	// start (AGENTIC_POOLS=name=runtime:size,…).
	Pools []ports.Pool
	// PreviewDomain is the domain of preview hosts,
	// <port>-<environment>.<domain> (AGENTIC_PREVIEW_DOMAIN).
	PreviewDomain string
	// PreviewKeepHost passes the browser's Host header to the app instead
	// of localhost:<port> (AGENTIC_PREVIEW_HOST=keep).
	PreviewKeepHost bool
	// ForwardIdle closes a preview or port-forward connection idle this
	// long; ForwardMax bounds one environment's open ones.
	ForwardIdle time.Duration
	ForwardMax  int
	// TestResolve is a test hook (AGENTIC_TEST_RESOLVE=name=ip,…): names the
	// egress resolves to the given address instead of asking DNS.
	TestResolve map[string]netip.Addr
	// ModelPrices price the model usage of requests through injected
	// secrets (AGENTIC_MODEL_PRICES=prefix=input/output,… over the
	// defaults, dollars per million tokens).
	ModelPrices inject.Prices
	// Tracing is OpenTelemetry tracing, set up by run from the standard
	// OTEL_EXPORTER_OTLP_* variables of the process (not a flag, nor the
	// config file); nil is off.
	Tracing *telemetry.Tracing
}

// Ports derived from LISTEN_ADDR, as the contract fixes them.
func (c Config) agentAddr() string { return c.ListenAddr }
func (c Config) wsAddr() string    { return c.operatorAddr(1) }
func (c Config) restAddr() string  { return c.operatorAddr(2) }

// operatorAddr is LISTEN_ADDR's port+delta on AGENTIC_OPERATOR_HOST, so
// that the agent port can face a network while the operator API does not.
func (c Config) operatorAddr(delta int) string {
	addr := offsetAddr(c.ListenAddr, delta)
	if c.OperatorHost == "" {
		return addr
	}
	_, port, _ := net.SplitHostPort(addr)
	return net.JoinHostPort(c.OperatorHost, port)
}

func offsetAddr(addr string, delta int) string {
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	return net.JoinHostPort(host, strconv.Itoa(p+delta))
}

// operatorOrigins are the origins of this server's own pages, as browsers
// send them: the REST port (where pages are served) and the WebSocket port,
// on each name the operator side is reached by.
func (c Config) operatorOrigins() []string {
	host, _, _ := net.SplitHostPort(c.restAddr())
	hosts := []string{host}
	if c.AdvertiseHost != "" {
		hosts = append(hosts, c.AdvertiseHost)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && (ip.IsLoopback() || ip.IsUnspecified())) {
		hosts = append(hosts, "127.0.0.1", "localhost", "::1")
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if name, err := os.Hostname(); err == nil {
			hosts = append(hosts, name)
		}
	}
	var out []string
	for _, addr := range []string{c.restAddr(), c.wsAddr()} {
		_, port, _ := net.SplitHostPort(addr)
		for _, h := range hosts {
			if h != "" && !net.ParseIP(h).IsUnspecified() {
				out = append(out, "http://"+net.JoinHostPort(h, port))
			}
		}
	}
	return out
}

// agentCA is the CA host agents trust for the agent port: the one made
// under AGENTIC_AGENT_TLS=auto ("" otherwise: off, or given files signed by
// a CA the system trusts).
func (c Config) agentCA() string {
	if c.AgentTLS != "auto" {
		return ""
	}
	return filepath.Join(c.DataDir, "tls", tlsca.CAFile)
}

// agentEnv is what every agent this server starts on the host is given
// to trust the agent port.
func (c Config) agentEnv() []string {
	if ca := c.agentCA(); ca != "" {
		return []string{"MANAGEMENT_CA=" + ca}
	}
	return nil
}

// agentServerURL is where host agents reach the agent port.
func (c Config) agentServerURL() string {
	host, port, _ := net.SplitHostPort(c.ListenAddr)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	scheme := "https://"
	if c.AgentTLS == "off" {
		scheme = "http://"
	}
	return scheme + net.JoinHostPort(host, port)
}

const defaultConfigFile = "/etc/agentic-sandbox/management.env"

// flagEnv maps each generic flag to the variable it overrides (the
// runtimes' own flags are their settings').
var flagEnv = map[string]string{
	"listen":            "LISTEN_ADDR",
	"advertise-host":    "AGENTIC_ADVERTISE_HOST",
	"secrets-dir":       "SECRETS_DIR",
	"host-agents":       "AGENTIC_HOST_AGENTS",
	"agent-binary":      "AGENTIC_AGENT_BINARY",
	"aiwg-endpoint":     "AIWG_SERVE_ENDPOINT",
	"aiwg-name":         "AIWG_SERVE_NAME",
	"disconnect-grace":  "AGENTIC_DISCONNECT_GRACE",
	"viewer-stall":      "AGENTIC_VIEWER_STALL_TIMEOUT",
	"mission-retention": "AGENTIC_MISSION_RETENTION",
	"runtimes":          "AGENTIC_RUNTIMES",
	"agent-socket":      "AGENTIC_AGENT_SOCKET",
	"operator-host":     "AGENTIC_OPERATOR_HOST",
	"agent-tls":         "AGENTIC_AGENT_TLS",
	"session-retention": "AGENTIC_SESSION_RETENTION",
	"file-max-bytes":    "AGENTIC_FILE_MAX_BYTES",
	"task-runtime":      "AGENTIC_TASK_RUNTIME",
	"task-repo-dirs":    "AGENTIC_TASK_REPO_DIRS",
	"host-user":         "AGENTIC_HOST_USER",
	"host-uids":         "AGENTIC_HOST_UIDS",
	"allowed-networks":  "AGENTIC_ALLOWED_NETWORKS",
	"preview-domain":    "AGENTIC_PREVIEW_DOMAIN",
}

// legacyHostUser is the system user all host agents' commands ran as
// before each had its own; named in AGENTIC_HOST_USER it is created if
// missing.
const legacyHostUser = "agentic-host"

func loadConfig(args, environ []string, stderr io.Writer, version string) (Config, error) {
	fs := flag.NewFlagSet("agentic-mgmt", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.String("listen", "", "agent RPC address; client WebSocket on port+1, REST on port+2 (env LISTEN_ADDR, default 127.0.0.1:8120)")
	fs.String("advertise-host", "", "host name advertised to aiwg serve (env AGENTIC_ADVERTISE_HOST)")
	fs.String("secrets-dir", "", "agent secret hashes; its parent is the data dir (env SECRETS_DIR)")
	fs.String("host-agents", "", "number of host agents to supervise (env AGENTIC_HOST_AGENTS, default 0)")
	fs.String("agent-binary", "", "agentic-agent binary for host agents (env AGENTIC_AGENT_BINARY, default: next to this binary, then PATH)")
	fs.String("aiwg-endpoint", "", "base URL of aiwg serve (env AIWG_SERVE_ENDPOINT)")
	fs.String("aiwg-name", "", "display name for aiwg serve (env AIWG_SERVE_NAME)")
	fs.String("disconnect-grace", "", "how long a disconnected agent stays listed (env AGENTIC_DISCONNECT_GRACE, default 5m)")
	fs.String("viewer-stall", "", "how long a terminal viewer may leave output unread before it is disconnected (env AGENTIC_VIEWER_STALL_TIMEOUT, default 2m)")
	fs.String("runtimes", "", "runtimes for environments, comma-separated, of "+strings.Join(runtimeNames(), ", ")+" (env AGENTIC_RUNTIMES, default: those found, see Runtimes below)")
	fs.String("agent-socket", "", "unix socket for agents without a network (env AGENTIC_AGENT_SOCKET, default <data dir>/agent-link/agent.sock)")
	fs.String("host-user", "", "one user every host agent's commands run as (env AGENTIC_HOST_USER; default as root: users of its own for each host agent, from AGENTIC_HOST_UIDS; else the server's own user)")
	fs.String("host-uids", "", "uid range host agents' own users come from, two uids per agent (env AGENTIC_HOST_UIDS, default "+hostsup.DefaultUIDs+")")
	fs.String("session-retention", "", "how long ended sessions and their logs are kept (env AGENTIC_SESSION_RETENTION, default 24h)")
	fs.String("task-runtime", "", "runtime of a task whose manifest names none (env AGENTIC_TASK_RUNTIME, default "+unmark(defaultRuntimeDoc())+")")
	fs.String("task-repo-dirs", "", "directories whose local task repositories a root server reads itself, absolute, comma- or colon-separated; others it reads as nobody (env AGENTIC_TASK_REPO_DIRS, default none)")
	fs.String("file-max-bytes", "", "largest file or archive moved to or from an agent, in bytes (env AGENTIC_FILE_MAX_BYTES, default 16 GiB)")
	fs.String("agent-tls", "", "TLS on the agent port: off, auto or CERT.pem:KEY.pem (env AGENTIC_AGENT_TLS, default off on loopback, else auto)")
	fs.String("operator-host", "", "host the REST API and the client WebSocket listen on (env AGENTIC_OPERATOR_HOST, default LISTEN_ADDR's host)")
	fs.String("allowed-networks", "", "network modes callers may ask for containers and VMs, comma-separated (env AGENTIC_ALLOWED_NETWORKS, default none)")
	fs.String("mission-retention", "", "how long finished missions stay in missions.json before the archive (env AGENTIC_MISSION_RETENTION, default 1h)")
	fs.String("preview-domain", "", "domain of preview hosts <port>-<environment>.<domain>, served on the REST listener (env AGENTIC_PREVIEW_DOMAIN, default localhost)")
	configFile := fs.String("config", defaultConfigFile, "env file read after the environment")
	printToken := fs.Bool("print-token", false, "print the operator token on start-up")
	envOf := maps.Clone(flagEnv)
	maps.Copy(envOf, registerRuntimeFlags(fs))
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
		fs.PrintDefaults()
		runtimesUsage(fs.Output())
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	src, err := envfile.SourceFromFlags(fs, envOf, environ, *configFile)
	if err != nil {
		return Config{}, err
	}

	cfg := Config{
		ListenAddr:   src.GetDefault("LISTEN_ADDR", "127.0.0.1:8120"),
		SecretsDir:   src.GetDefault("SECRETS_DIR", filestore.DefaultSecretsDir()),
		AgentBinary:  src.GetDefault("AGENTIC_AGENT_BINARY", ""),
		AIWGEndpoint: src.GetDefault("AIWG_SERVE_ENDPOINT", ""),
		AIWGName:     src.GetDefault("AIWG_SERVE_NAME", "agentic-sandbox"),
		PrintToken:   *printToken,
		Version:      version,
	}
	cfg.OperatorToken, _ = src.Get("AGENTIC_OPERATOR_TOKEN")
	host, port, err := net.SplitHostPort(cfg.ListenAddr)
	if err != nil {
		return Config{}, fmt.Errorf("LISTEN_ADDR %q: want host:port", cfg.ListenAddr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65533 {
		return Config{}, fmt.Errorf("LISTEN_ADDR %q: port must be 1-65533 (port+1 and port+2 are used too)", cfg.ListenAddr)
	}
	cfg.AdvertiseHost = src.GetDefault("AGENTIC_ADVERTISE_HOST", host)
	cfg.OperatorHost = src.GetDefault("AGENTIC_OPERATOR_HOST", "")
	// As root, each host agent gets users of its own unless told otherwise.
	cfg.HostUser = src.GetDefault("AGENTIC_HOST_USER", "")
	cfg.HostUIDs = src.GetDefault("AGENTIC_HOST_UIDS", hostsup.DefaultUIDs)
	if _, _, err := hostsup.ParseUIDRange(cfg.HostUIDs); err != nil {
		return Config{}, fmt.Errorf("AGENTIC_HOST_UIDS %w", err)
	}
	if cfg.SessionRetention, err = time.ParseDuration(src.GetDefault("AGENTIC_SESSION_RETENTION", "24h")); err != nil || cfg.SessionRetention <= 0 {
		return Config{}, fmt.Errorf("AGENTIC_SESSION_RETENTION must be a positive duration such as 24h")
	}
	if cfg.TaskRuntime = src.GetDefault("AGENTIC_TASK_RUNTIME", ""); cfg.TaskRuntime != "" && !slices.Contains(runtimeNames(), cfg.TaskRuntime) {
		return Config{}, fmt.Errorf("AGENTIC_TASK_RUNTIME: unknown runtime %q (known: %s)", cfg.TaskRuntime, strings.Join(runtimeNames(), ", "))
	}
	if cfg.TaskRepoDirs, err = gitwork.ParseRepoDirs(src.GetDefault("AGENTIC_TASK_REPO_DIRS", "")); err != nil {
		return Config{}, fmt.Errorf("AGENTIC_TASK_REPO_DIRS: %w", err)
	}
	if cfg.TaskHold, err = parseHolds(os.Getenv("AGENTIC_TEST_TASK_HOLD")); err != nil {
		return Config{}, fmt.Errorf("AGENTIC_TEST_TASK_HOLD: %w", err)
	}
	if cfg.FileMaxBytes, err = strconv.ParseInt(src.GetDefault("AGENTIC_FILE_MAX_BYTES", strconv.FormatInt(agentrpc.DefaultMaxFileBytes, 10)), 10, 64); err != nil || cfg.FileMaxBytes <= 0 {
		return Config{}, fmt.Errorf("AGENTIC_FILE_MAX_BYTES must be a positive number of bytes")
	}
	if cfg.HibernateMaxBytes, err = strconv.ParseInt(src.GetDefault("AGENTIC_HIBERNATE_MAX_BYTES", "0"), 10, 64); err != nil || cfg.HibernateMaxBytes < 0 {
		return Config{}, fmt.Errorf("AGENTIC_HIBERNATE_MAX_BYTES must be a number of bytes (0: no bound)")
	}
	if cfg.WakeTimeout, err = time.ParseDuration(src.GetDefault("AGENTIC_WAKE_TIMEOUT", environment.DefaultWakeTimeout.String())); err != nil || cfg.WakeTimeout <= 0 {
		return Config{}, fmt.Errorf("AGENTIC_WAKE_TIMEOUT must be a positive duration such as 2m")
	}
	// TLS is off by default only where nothing can listen in: loopback.
	tlsDefault := "auto"
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		tlsDefault = "off"
	}
	cfg.AgentTLS = src.GetDefault("AGENTIC_AGENT_TLS", tlsDefault)
	if cfg.AgentTLS != "off" && cfg.AgentTLS != "auto" {
		if c, k, ok := strings.Cut(cfg.AgentTLS, ":"); !ok || c == "" || k == "" {
			return Config{}, fmt.Errorf("AGENTIC_AGENT_TLS %q: want off, auto or CERT.pem:KEY.pem", cfg.AgentTLS)
		}
	}
	if cfg.HostAgents, err = strconv.Atoi(src.GetDefault("AGENTIC_HOST_AGENTS", "0")); err != nil || cfg.HostAgents < 0 || cfg.HostAgents > 99 {
		return Config{}, fmt.Errorf("AGENTIC_HOST_AGENTS must be a number from 0 to 99")
	}
	if cfg.DisconnectGrace, err = time.ParseDuration(src.GetDefault("AGENTIC_DISCONNECT_GRACE", "5m")); err != nil || cfg.DisconnectGrace <= 0 {
		return Config{}, fmt.Errorf("AGENTIC_DISCONNECT_GRACE must be a positive duration such as 5m")
	}
	if cfg.ViewerStallTimeout, err = time.ParseDuration(src.GetDefault("AGENTIC_VIEWER_STALL_TIMEOUT", "2m")); err != nil || cfg.ViewerStallTimeout <= 0 {
		return Config{}, fmt.Errorf("AGENTIC_VIEWER_STALL_TIMEOUT must be a positive duration such as 2m")
	}
	if cfg.MissionRetention, err = time.ParseDuration(src.GetDefault("AGENTIC_MISSION_RETENTION", "1h")); err != nil || cfg.MissionRetention <= 0 {
		return Config{}, fmt.Errorf("AGENTIC_MISSION_RETENTION must be a positive duration such as 1h")
	}
	if cfg.PreviewDomain, err = previewDomain(src.GetDefault("AGENTIC_PREVIEW_DOMAIN", "localhost")); err != nil {
		return Config{}, err
	}
	switch h := src.GetDefault("AGENTIC_PREVIEW_HOST", "rewrite"); h {
	case "rewrite", "keep":
		cfg.PreviewKeepHost = h == "keep"
	default:
		return Config{}, fmt.Errorf("AGENTIC_PREVIEW_HOST %q: want rewrite (Host: localhost:<port>, the default) or keep", h)
	}
	if cfg.ForwardIdle, err = time.ParseDuration(src.GetDefault("AGENTIC_PREVIEW_IDLE_TIMEOUT", agentrpc.DefaultForwardIdle.String())); err != nil || cfg.ForwardIdle <= 0 {
		return Config{}, fmt.Errorf("AGENTIC_PREVIEW_IDLE_TIMEOUT must be a positive duration such as 15m")
	}
	if cfg.ForwardMax, err = strconv.Atoi(src.GetDefault("AGENTIC_PREVIEW_MAX_CONNECTIONS", strconv.Itoa(agentrpc.DefaultMaxForwards))); err != nil || cfg.ForwardMax < 1 || cfg.ForwardMax > 65536 {
		return Config{}, fmt.Errorf("AGENTIC_PREVIEW_MAX_CONNECTIONS must be a number from 1 to 65536")
	}
	if cfg.SecretsDir, err = filepath.Abs(cfg.SecretsDir); err != nil {
		return Config{}, err
	}
	cfg.DataDir = filepath.Dir(cfg.SecretsDir)
	if err := repoDirsOutside(cfg.TaskRepoDirs, cfg.DataDir); err != nil {
		return Config{}, fmt.Errorf("AGENTIC_TASK_REPO_DIRS: %w", err)
	}
	if list := strings.TrimSpace(src.GetDefault("AGENTIC_RUNTIMES", "")); list != "" {
		for _, r := range strings.Split(list, ",") {
			r = strings.TrimSpace(r)
			if !slices.Contains(runtimeNames(), r) {
				return Config{}, fmt.Errorf("AGENTIC_RUNTIMES: unknown runtime %q (known: %s)", r, strings.Join(runtimeNames(), ", "))
			}
			if !slices.Contains(cfg.Runtimes, r) {
				cfg.Runtimes = append(cfg.Runtimes, r)
			}
		}
	}
	cfg.AgentSocket = src.GetDefault("AGENTIC_AGENT_SOCKET", filepath.Join(cfg.DataDir, "agent-link", "agent.sock"))
	if cfg.RuntimeOptions, err = configureRuntimes(src.GetDefault, cfg); err != nil {
		return Config{}, err
	}
	for _, n := range strings.Split(src.GetDefault("AGENTIC_ALLOWED_NETWORKS", string(ports.NetworkNone)), ",") {
		n = strings.TrimSpace(n)
		mode, err := ports.ParseNetworkMode(n)
		if err != nil {
			return Config{}, fmt.Errorf("AGENTIC_ALLOWED_NETWORKS: unknown network mode %q (known: %s)", n, ports.NetworkModeList(ports.KnownNetworkModes))
		}
		cfg.AllowedNetworks = append(cfg.AllowedNetworks, mode)
	}
	if v := src.GetDefault("AGENTIC_EGRESS_ALLOWED_HOSTS", ""); v != "" {
		if cfg.EgressBound, err = egress.ParseRules(strings.Split(v, ",")); err != nil {
			return Config{}, fmt.Errorf("AGENTIC_EGRESS_ALLOWED_HOSTS: %w", err)
		}
	}
	if cfg.ModelPrices, err = inject.ParsePrices(src.GetDefault("AGENTIC_MODEL_PRICES", ""), inject.DefaultPrices); err != nil {
		return Config{}, fmt.Errorf("AGENTIC_MODEL_PRICES: %w", err)
	}
	if cfg.Pools, err = parsePools(src.GetDefault("AGENTIC_POOLS", "")); err != nil {
		return Config{}, fmt.Errorf("AGENTIC_POOLS: %w", err)
	}
	if v := os.Getenv("AGENTIC_TEST_RESOLVE"); v != "" {
		cfg.TestResolve = map[string]netip.Addr{}
		for _, pair := range strings.Split(v, ",") {
			name, ip, ok := strings.Cut(pair, "=")
			a, err := netip.ParseAddr(ip)
			if !ok || err != nil {
				return Config{}, fmt.Errorf("AGENTIC_TEST_RESOLVE: %q is not name=address", pair)
			}
			cfg.TestResolve[strings.ToLower(name)] = a
		}
	}
	return cfg, nil
}

// repoDirsOutside refuses a repository directory that holds the data dir
// or is inside it: callers would read its files (other tasks' trees).
func repoDirsOutside(dirs []string, dataDir string) error {
	data := dataDir
	if real, err := filepath.EvalSymlinks(dataDir); err == nil {
		data = real
	}
	within := func(dir, p string) bool {
		rel, err := filepath.Rel(dir, p)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
	}
	for _, d := range dirs {
		if within(d, data) || within(data, d) {
			return fmt.Errorf("%s overlaps the data dir %s", d, dataDir)
		}
	}
	return nil
}

// parsePools reads name=runtime:size entries separated by commas; the
// environment service checks each against its runtime.
func parsePools(v string) ([]ports.Pool, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var out []ports.Pool
	seen := map[string]bool{}
	for _, entry := range strings.Split(v, ",") {
		name, rest, ok := strings.Cut(strings.TrimSpace(entry), "=")
		runtime, size, ok2 := strings.Cut(rest, ":")
		n, err := strconv.Atoi(size)
		if !ok || !ok2 || name == "" || runtime == "" || err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not name=runtime:size", entry)
		}
		if seen[name] {
			return nil, fmt.Errorf("pool %q is named twice", name)
		}
		seen[name] = true
		out = append(out, ports.Pool{Name: name, Runtime: runtime, Size: n})
	}
	return out, nil
}

// parseHolds reads state=duration pairs separated by commas.
func parseHolds(v string) (map[string]time.Duration, error) {
	if v == "" {
		return nil, nil
	}
	out := map[string]time.Duration{}
	for _, pair := range strings.Split(v, ",") {
		state, dur, ok := strings.Cut(strings.TrimSpace(pair), "=")
		d, err := time.ParseDuration(dur)
		if !ok || state == "" || err != nil || d < 0 {
			return nil, fmt.Errorf("%q is not state=duration", pair)
		}
		out[state] = d
	}
	return out, nil
}

// previewDomain checks AGENTIC_PREVIEW_DOMAIN: a DNS name (lower case, no
// port, no wildcard), under which <port>-<environment>.<domain> are the
// preview hosts.
func previewDomain(d string) (string, error) {
	d = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(d)), ".")
	bad := d == "" || len(d) > 200 || strings.HasPrefix(d, ".") || strings.Contains(d, "..")
	for _, r := range d {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			bad = true
		}
	}
	if bad {
		return "", fmt.Errorf("AGENTIC_PREVIEW_DOMAIN %q: want a DNS name such as preview.example.com (letters, digits, - and .)", d)
	}
	return d, nil
}
