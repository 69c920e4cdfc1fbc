package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/aiwg"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/dashboard"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup"
	mcptools "github.com/agentic-sandbox/agentic-sandbox/adapters/mcp"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/promexport"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/system"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/tlsca"
	"github.com/agentic-sandbox/agentic-sandbox/core/wakeful"
	"github.com/agentic-sandbox/agentic-sandbox/internal/changes"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/credential"
	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// OperatorToken is the bearer token of the operator API.
type OperatorToken string

// DataDir is the data dir, made (0700) before any store opens a file in it.
type DataDir string

func provideDataDir(cfg Config) (DataDir, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	return DataDir(cfg.DataDir), nil
}

// AgentTLS is the agent port's TLS, nil when it is off.
type AgentTLS struct{ Config *tls.Config }

func provideAgentTLS(cfg Config, dir DataDir) (*AgentTLS, error) {
	switch cfg.AgentTLS {
	case "off":
		return nil, nil
	case "auto":
		a, err := tlsca.Open(filepath.Join(string(dir), "tls"), agentTLSHosts(cfg), nil)
		if err != nil {
			return nil, fmt.Errorf("agent TLS: %w", err)
		}
		return &AgentTLS{Config: a.TLSConfig()}, nil
	}
	certFile, keyFile, _ := strings.Cut(cfg.AgentTLS, ":")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("AGENTIC_AGENT_TLS: %w", err)
	}
	return &AgentTLS{Config: &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}, Certificates: []tls.Certificate{cert}}}, nil
}

// agentTLSHosts are the names the agent port's certificate is made for
// under AGENTIC_AGENT_TLS=auto: LISTEN_ADDR's host, AGENTIC_ADVERTISE_HOST
// (what remote agents and pods dial), loopback and the machine's name.
func agentTLSHosts(cfg Config) []string {
	host, _, _ := net.SplitHostPort(cfg.ListenAddr)
	hosts := []string{host, cfg.AdvertiseHost, "localhost", "127.0.0.1"}
	if name, err := os.Hostname(); err == nil {
		hosts = append(hosts, name)
	}
	return hosts
}

// agentCAPEM is the CA (PEM) of AGENTIC_AGENT_TLS=auto, for a runtime
// whose agents dial the agent port over the network (given to them with
// their credentials). Runtimes are made before the agent port's TLS
// (provideAgentTLS), so on a first start it makes the CA, with the same
// directory and certificate hosts. nil: TLS off, or given files signed by
// a CA the agents' system trusts.
func agentCAPEM(cfg Config) ([]byte, error) {
	if cfg.agentCA() == "" {
		return nil, nil
	}
	if _, err := tlsca.Open(filepath.Dir(cfg.agentCA()), agentTLSHosts(cfg), nil); err != nil {
		return nil, fmt.Errorf("agent TLS: %w", err)
	}
	return os.ReadFile(cfg.agentCA())
}

// provideHostUsers gives each host agent users of its own when the server
// is root (AGENTIC_HOST_UIDS), or one shared user for their commands
// (AGENTIC_HOST_USER; agentic-host is created if missing); nil runs host
// agents as this server's own user.
func provideHostUsers(cfg Config, dir DataDir, log *slog.Logger) (*hostsup.Users, error) {
	if os.Geteuid() != 0 {
		if cfg.HostUser != "" {
			if u, err := user.Lookup(cfg.HostUser); err != nil || u.Uid != strconv.Itoa(os.Geteuid()) {
				return nil, fmt.Errorf("AGENTIC_HOST_USER %s: only a root server can run agents as another user", cfg.HostUser)
			}
		}
		return nil, nil
	}
	first, last, err := hostsup.ParseUIDRange(cfg.HostUIDs)
	if err != nil {
		return nil, fmt.Errorf("AGENTIC_HOST_UIDS %w", err)
	}
	ucfg := hostsup.UsersConfig{File: filepath.Join(string(dir), "host-users.json"), First: first, Last: last, Logger: log}
	if cfg.HostUser != "" {
		u, err := user.Lookup(cfg.HostUser)
		if err != nil && cfg.HostUser == legacyHostUser {
			out, cerr := exec.Command("useradd", "--system", "--user-group", "--no-create-home",
				"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", legacyHostUser).CombinedOutput()
			if cerr != nil {
				return nil, fmt.Errorf("AGENTIC_HOST_USER: creating %s: %v: %s", legacyHostUser, cerr, out)
			}
			log.Info("created the system user host agents' commands run as", "user", legacyHostUser)
			u, err = user.Lookup(cfg.HostUser)
		}
		if err != nil {
			return nil, fmt.Errorf("AGENTIC_HOST_USER: %w", err)
		}
		if u.Uid == "0" {
			return nil, nil // root asked for: nothing to switch
		}
		ucfg.Shared = u
	}
	return hostsup.NewUsers(ucfg)
}

func provideCredentials(cfg Config) (*filestore.AgentHashes, error) {
	return filestore.NewAgentHashes(cfg.SecretsDir)
}

func provideOperatorToken(cfg Config, dir DataDir) (OperatorToken, error) {
	if cfg.OperatorToken != "" {
		return OperatorToken(cfg.OperatorToken), nil
	}
	t, err := filestore.LoadOrCreateOperatorToken(string(dir))
	return OperatorToken(t), err
}

// provideChanges is the one place every use case tells of its changes and
// live views (GET /api/v1/changes) hear of them.
func provideChanges() *changes.Hub { return changes.NewHub() }

// provideAgentService is the agent link, given at once everything it
// reports to: the router, bound to the use cases once they are made.
func provideAgentService(cfg Config, creds ports.AgentCredentials, clock ports.Clock, ids ports.IDGenerator, token OperatorToken, log *slog.Logger, ch ports.ChangeNotifier, reports *linkReports) *agentrpc.Service {
	return agentrpc.New(agentrpc.Config{
		Credentials:     creds,
		Clock:           clock,
		IDs:             ids,
		Logger:          log,
		DisconnectGrace: cfg.DisconnectGrace,
		OperatorToken:   string(token),
		MaxFileBytes:    cfg.FileMaxBytes,
		Changes:         ch,
		Reports:         reports,
		Egress:          linkEgress(cfg, log, reports),
		Forwards:        agentrpc.Forwards{MaxPerAgent: cfg.ForwardMax, Idle: cfg.ForwardIdle},
		Tracing:         cfg.Tracing,
	})
}

// provideLinkHold is what ends one agent's connections while its
// environment is saved with its memory: the agent listeners go through it
// (App.Run), the environments use it (LinkQuiet).
func provideLinkHold() *agentrpc.LinkHold { return agentrpc.NewLinkHold() }

func provideSupervisor(cfg Config, creds ports.AgentCredentials, log *slog.Logger, hostUsers *hostsup.Users) (*hostsup.Supervisor, error) {
	if cfg.HostAgents == 0 {
		return nil, nil
	}
	bin, err := agentBinary(cfg.AgentBinary)
	if err != nil {
		return nil, err
	}
	return hostsup.New(hostsup.Config{
		ExtraEnv:    cfg.agentEnv(),
		Users:       hostUsers,
		Count:       cfg.HostAgents,
		AgentBinary: bin,
		StateDir:    filepath.Join(cfg.DataDir, "host-agents"),
		ServerURL:   cfg.agentServerURL(),
		Credentials: creds,
		Logger:      log,
	}), nil
}

// agentBinary finds agentic-agent: configured, else beside this binary, else in PATH.
func agentBinary(configured string) (string, error) {
	if configured != "" {
		return filepath.Abs(configured)
	}
	if self, err := os.Executable(); err == nil {
		sibling := filepath.Join(filepath.Dir(self), "agentic-agent")
		if _, err := os.Stat(sibling); err == nil {
			return sibling, nil
		}
	}
	p, err := exec.LookPath("agentic-agent")
	if err != nil {
		return "", fmt.Errorf("agentic-agent binary not found (set AGENTIC_AGENT_BINARY)")
	}
	return filepath.Abs(p)
}

// OperatorHTTP is what the operator's HTTP ports (REST and the client
// WebSocket) know of this server: the operator token, the version they
// report, the origins a signed-in page may change state from.
type OperatorHTTP struct {
	Token   string
	Version string
	Origins []string
}

func provideOperatorHTTP(cfg Config, token OperatorToken) OperatorHTTP {
	return OperatorHTTP{Token: string(token), Version: cfg.Version, Origins: cfg.operatorOrigins()}
}

// MetricsHandler serves GET /metrics.
type MetricsHandler http.Handler

// provideMetrics is the metrics page. The collectors are made before the
// use cases (which report into them); the counts read at each scrape come
// from the use cases, named here where both exist.
func provideMetrics(svc *agentrpc.Service, uc UseCases, times *promexport.ProvisionTimes, taskMetrics *promexport.TaskMetrics, egressMetrics *promexport.EgressMetrics, poolMetrics *promexport.PoolMetrics, sleep *promexport.SleepMetrics) MetricsHandler {
	taskMetrics.Counts = uc.Tasks.Counts
	poolMetrics.Stats = func() []promexport.PoolStats {
		var out []promexport.PoolStats
		for _, p := range uc.Environments.Pools() {
			out = append(out, promexport.PoolStats{Name: p.Name, Size: p.Size, Idle: p.Idle, Hits: p.Hits, Misses: p.Misses})
		}
		return out
	}
	sleep.Hibernated = uc.Environments.Hibernated
	return promexport.Handler(svc, times, taskMetrics, egressMetrics, poolMetrics, sleep)
}

func provideREST(cfg Config, svc *agentrpc.Service, op OperatorHTTP, uc UseCases, link *aiwg.Client, logs *filestore.SessionLog,
	metrics MetricsHandler, ready *Readiness, clock ports.Clock, log *slog.Logger, ch *changes.Hub, public *filestore.PublicPorts, signIns *signin.Sessions, tokens *filestore.Tokens, creds *credentialAudit, watch *credential.Watchers,
	w Wakeful, viewed *wakeful.Sessions) (RESTHandler, error) {
	_, wsPort, _ := net.SplitHostPort(cfg.wsAddr())
	port, _ := strconv.Atoi(wsPort)
	dash, err := dashboard.New(port)
	if err != nil {
		return nil, err
	}
	srv := rest.New(rest.Deps{
		Link:         w.Link,
		Agents:       svc,
		Token:        op.Token,
		Tokens:       tokens,
		Version:      op.Version,
		Readiness:    ready.Checks,
		Metrics:      metrics,
		Logger:       log,
		Clock:        clock,
		Missions:     uc.Missions,
		Executor:     link,
		Sessions:     viewed,
		SessionLog:   logs,
		Environments: attributedEnvironments{uc.Environments, creds},
		Pools:        uc.Environments,
		Files:        w.Files,
		MaxFileBytes: cfg.FileMaxBytes,
		Tasks:        uc.Tasks,
		Origins:      op.Origins,
		SignIns:      signIns,
		Watch:        watch,
		Audit:        uc.Audit,
		Dashboard:    dash,
		Changes:      ch,

		ListeningPorts: svc,
		Forwards:       w.Dialer,
		PublicPorts:    public,
		PreviewDomain:  cfg.PreviewDomain,
	})
	// Background commands outlive a restart on their agents: the link
	// hands those its agents report back to the REST API, which started them.
	svc.SetCommandAdopter(srv)
	// MCP at /mcp on the same port: its tools call this REST handler in
	// process with the caller's own operator token.
	// A span per request when tracing is on (the handler itself when off).
	api := mcptools.Mount(cfg.Tracing.Handler(srv.Handler()), mcptools.HTTPOptions{Token: op.Token, Version: op.Version, Logger: log})
	// Previews in front: a preview host never reaches the API.
	return newPreviews(cfg, op, svc, w.Dialer, uc, public, signIns, tokens, clock, log).Wrap(api), nil
}

// provideApp takes LinkBound so that the link's reports reach the use
// cases before the app can serve.
func provideApp(cfg Config, log *slog.Logger, svc *agentrpc.Service, h RESTHandler, sup *hostsup.Supervisor, token OperatorToken, banner io.Writer,
	uc UseCases, link *aiwg.Client, ws WSHandler, ready *Readiness, agentTLS *AgentTLS, hold *agentrpc.LinkHold, _ LinkBound) *App {
	return &App{cfg: cfg, log: log, agents: svc, rest: h, supervisor: sup, token: token, banner: banner,
		missions: uc.Missions, sessions: uc.Sessions, aiwg: link, ws: ws, environments: uc.Environments, tasks: uc.Tasks, ready: ready, tls: agentTLS, hold: hold}
}
func provideClock() clock.Wall  { return clock.Wall{} }
func provideIDs() system.UUIDv7 { return system.UUIDv7{} }
