// Command agentic-agent runs inside a VM, a container or on the host and
// connects back to agentic-mgmt to run the commands it is sent.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentd"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentfs"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/envfile"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/procexec"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/internal/runas"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"golang.org/x/sys/unix"
)

var version = "0.1.0-dev"

// noTunnelRawDefault is AGENT_NO_TUNNEL_RAW where it is not set: an agent
// built with -ldflags "-X main.noTunnelRawDefault=1" carries its egress
// tunnels on Tunnel streams wherever it runs, as one from before raw
// tunnels (the e2e tests of the fallback put it in containers, whose
// environment they do not choose).
var noTunnelRawDefault = ""

const defaultConfigFile = "/etc/agentic-sandbox/agent.env"

// shutdownGrace bounds how long SIGTERM waits for running commands to end.
const shutdownGrace = 5 * time.Second

func main() {
	if len(os.Args) > 1 && os.Args[1] == agentfs.HelperArg {
		// The file helper: this binary, started by the agent as its
		// commands' user for one file operation.
		os.Exit(agentfs.Serve(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == agentd.PermissionHelperArg {
		// claude's permission prompt server, started by claude in a task.
		if err := agentd.ServePermissionPrompts(context.Background(), os.Getenv(agentd.EnvPermissionSocket)); err != nil {
			fmt.Fprintln(os.Stderr, "agentic-agent permission prompts:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == installArg {
		// An init container of the agent image puts the agent into a
		// volume that the workload's container, of any image, runs it from.
		if err := install(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "agentic-agent install:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(run(os.Args[1:], os.Environ(), os.Stderr))
}

// installArg makes the agent copy its own binary: `agentic-agent install DEST`.
const installArg = "install"

// install copies this executable to dest (0755), through a temporary file
// beside it, so that a reader never sees half a binary.
func install(args []string) error {
	if len(args) != 1 || args[0] == "" {
		return errors.New("usage: agentic-agent install DEST")
	}
	dest := args[0]
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".agentic-agent-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest) //nolint:gosec // the destination is the caller's to name: an init container's own volume
}

func run(args, environ []string, stderr io.Writer) int {
	cfg, err := loadConfig(args, environ, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "agentic-agent:", err)
		return 2
	}
	// Nothing the agent runs may read its memory or its /proc environ,
	// where the secret is (os.Unsetenv does not clear the latter).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintln(stderr, "agentic-agent: prctl(PR_SET_DUMPABLE):", err)
		return 2
	}
	// Commands inherit the agent's environment; the secret must not reach
	// them, and where they run (host, container, vm) should, however the
	// agent was configured (flag, environment or agent.env).
	if err := errors.Join(os.Unsetenv("AGENT_SECRET"), os.Unsetenv("AGENT_SECRET_FD"), os.Unsetenv("AGENT_TMUX"), os.Unsetenv("AGENT_RUN_AS_HOME"), os.Unsetenv("AGENT_SECRET_FILE"), os.Unsetenv("AGENT_IDENTITY_FILE"), os.Unsetenv("AGENT_IDENTITY_FROM_LINK"), os.Unsetenv("AGENT_RUN_AS"), os.Setenv("AGENT_ID", cfg.AgentID),
		os.Setenv("AGENT_RUNTIME", string(agentwire.RuntimeKindFromProto(cfg.Runtime)))); err != nil {
		fmt.Fprintln(stderr, "agentic-agent:", err)
		return 2
	}

	log := slog.New(slog.NewTextHandler(stderr, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.Logger = log
	cfg.Version = version
	stopReq := make(chan string, 1)
	cfg.OnShutdown = func(reason string) {
		select {
		case stopReq <- reason:
		default:
		}
	}
	a, err := agentd.New(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "agentic-agent:", err)
		return 2
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sigs:
		log.Info("stopping", "agent_id", cfg.AgentID, "signal", s.String())
	case reason := <-stopReq:
		log.Info("stopping at the server's request", "reason", reason)
	}
	a.Shutdown(shutdownGrace)
	cancel()
	<-done
	return 0
}

// readSecretFD reads the secret from the inherited descriptor fdS and
// closes it, so that no command inherits it.
func readSecretFD(fdS string) (string, error) {
	fd, err := strconv.Atoi(fdS)
	if err != nil || fd < 3 {
		return "", fmt.Errorf("%q is not an inherited descriptor", fdS)
	}
	f := os.NewFile(uintptr(fd), "agent-secret")
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

var flagEnv = map[string]string{
	"id":      "AGENT_ID",
	"server":  "MANAGEMENT_SERVER",
	"secret":  "AGENT_SECRET",
	"runtime": "AGENT_RUNTIME",
	"labels":  "AGENT_LABELS",
}

// loadConfig reads flags, then the environment, then the env file.
func loadConfig(args, environ []string, stderr io.Writer) (agentd.Config, error) {
	fs := flag.NewFlagSet("agentic-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.String("id", "", "agent id (env AGENT_ID)")
	fs.String("server", "", "URL of the management server's agent port, e.g. http://127.0.0.1:8120 (env MANAGEMENT_SERVER)")
	fs.String("secret", "", "agent secret (env AGENT_SECRET; prefer the environment or the env file: flags show in ps)")
	fs.String("runtime", "", "where this agent runs: host, container or vm (env AGENT_RUNTIME, default host)")
	fs.String("labels", "", "comma-separated key=value labels (env AGENT_LABELS)")
	configFile := fs.String("config", defaultConfigFile, "env file read after the environment")
	if err := fs.Parse(args); err != nil {
		return agentd.Config{}, err
	}
	src, err := envfile.SourceFromFlags(fs, flagEnv, environ, *configFile)
	if err != nil {
		return agentd.Config{}, err
	}
	cfg := agentd.Config{
		AgentID:   src.GetDefault("AGENT_ID", ""),
		Secret:    src.GetDefault("AGENT_SECRET", ""),
		ServerURL: src.GetDefault("MANAGEMENT_SERVER", ""),
	}
	cfg.CAFile = src.GetDefault("MANAGEMENT_CA", "")
	cfg.EgressListen = src.GetDefault("AGENT_EGRESS_PROXY", "")
	cfg.BulkConnection = src.GetDefault("MANAGEMENT_BULK_CONNECTION", "") == "1"
	// An agent as before the file data plane (its bytes in Transfer
	// messages): for comparing the two, and a way back should it fail.
	cfg.NoFileDataPlane = src.GetDefault("AGENT_NO_FILE_DATA_PLANE", "") == "1"
	// And before the output data plane (output in OutputChunk messages).
	cfg.NoOutputDataPlane = src.GetDefault("AGENT_NO_OUTPUT_DATA_PLANE", "") == "1"
	// And before raw tunnels (egress on Tunnel streams, each message framed).
	cfg.NoTunnelRaw = src.GetDefault("AGENT_NO_TUNNEL_RAW", noTunnelRawDefault) == "1"
	// And before PTY sessions on connections of their own.
	cfg.NoSessionRaw = src.GetDefault("AGENT_NO_SESSION_RAW", "") == "1"
	// Commands as another user, who cannot read the agent's secret.
	runAs := src.GetDefault("AGENT_RUN_AS", "")
	if home := src.GetDefault("AGENT_RUN_AS_HOME", ""); home != "" {
		runas.SetHome(home)
	}
	cfg.Runner = procexec.Runner{DefaultUser: runAs}
	// Sessions kept in tmux need its server to run as the commands' user
	// (AGENT_TMUX=on, as host agents in their own user namespace have).
	if runAs != "" {
		if src.GetDefault("AGENT_TMUX", "") == "on" {
			cfg.TmuxUser = runAs
		} else {
			cfg.NoTmux = true
		}
	}
	// File work runs as the same user, in the same place, as the commands,
	// in this binary started again. Through /proc/self/exe, a magic link
	// that needs no search permission on the binary's directories (the
	// commands' user may have none there, as in a private temp dir).
	exe := "/proc/self/exe"
	if _, err := os.Stat(exe); err != nil {
		if exe, err = os.Executable(); err != nil {
			return cfg, fmt.Errorf("finding this binary for file work: %w", err)
		}
	}
	if cfg.Files, err = agentfs.New(exe, runAs); err != nil {
		return cfg, fmt.Errorf("AGENT_RUN_AS: %w", err)
	}
	// A secret pipe (AGENT_SECRET_FD, as host agents get theirs) is read
	// before anything runs and closed: the secret is never in an
	// environment or a file that a racing process could read.
	if fdS := src.GetDefault("AGENT_SECRET_FD", ""); fdS != "" && cfg.Secret == "" {
		if cfg.Secret, err = readSecretFD(fdS); err != nil {
			return cfg, fmt.Errorf("AGENT_SECRET_FD: %w", err)
		}
	}
	// A secret file is read once; the commands run as another user
	// (AGENT_RUN_AS) who cannot read it.
	if path := src.GetDefault("AGENT_SECRET_FILE", ""); path != "" && cfg.Secret == "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("AGENT_SECRET_FILE: %w", err)
		}
		cfg.Secret = strings.TrimSpace(string(b))
	}
	// A rename (a warm pool's member taken by a caller) outlives a restart.
	if path := src.GetDefault("AGENT_IDENTITY_FILE", ""); path != "" {
		cfg.IdentityFile = path
		id, secret, ok, err := agentd.ReadIdentityFile(path)
		if err != nil {
			return cfg, fmt.Errorf("AGENT_IDENTITY_FILE: %w", err)
		}
		if ok {
			cfg.AgentID, cfg.Secret = id, secret
		}
	}
	// A VM restored from a template asks its link who it is, unless it
	// already knows (an identity file from an earlier start).
	cfg.IdentityFromLink = src.GetDefault("AGENT_IDENTITY_FROM_LINK", "") == "1" && cfg.Secret == ""
	if cfg.IdentityFromLink {
		if !strings.HasPrefix(cfg.ServerURL, "serial:") {
			return cfg, errors.New("AGENT_IDENTITY_FROM_LINK needs a serial:// MANAGEMENT_SERVER")
		}
		if cfg.IdentityFile == "" {
			return cfg, errors.New("AGENT_IDENTITY_FROM_LINK needs AGENT_IDENTITY_FILE, where the identity is kept across restarts")
		}
		cfg.AgentID = ""
	} else if cfg.AgentID == "" {
		return cfg, errors.New("no agent id: set AGENT_ID or --id")
	}
	if cfg.Secret == "" && !cfg.IdentityFromLink {
		return cfg, errors.New("no secret: set AGENT_SECRET (environment or " + defaultConfigFile + ")")
	}
	if cfg.ServerURL == "" {
		return cfg, errors.New("no management server: set MANAGEMENT_SERVER or --server")
	}
	if !strings.Contains(cfg.ServerURL, "://") {
		cfg.ServerURL = "http://" + cfg.ServerURL
	}
	rt := ports.RuntimeKind(src.GetDefault("AGENT_RUNTIME", string(ports.KindHost)))
	if !rt.Valid() {
		return cfg, fmt.Errorf("AGENT_RUNTIME %q: want host, container or vm", rt)
	}
	cfg.Runtime = agentwire.RuntimeKindToProto(rt)
	if l := src.GetDefault("AGENT_LABELS", ""); l != "" {
		cfg.Labels = map[string]string{}
		for _, kv := range strings.Split(l, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok || k == "" {
				return cfg, fmt.Errorf("AGENT_LABELS: %q is not key=value", kv)
			}
			cfg.Labels[k] = v
		}
	}
	if v := src.GetDefault("AGENT_RECONNECT_MIN", ""); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < minReconnect || d > maxReconnect {
			return cfg, fmt.Errorf("AGENT_RECONNECT_MIN %q: want a duration from %v to %v", v, minReconnect, maxReconnect)
		}
		cfg.BackoffMin = d
	}
	return cfg, nil
}

// The bounds of AGENT_RECONNECT_MIN: below, a broken server would be
// hammered; above, the backoff's own ceiling.
const (
	minReconnect = 100 * time.Millisecond
	maxReconnect = 60 * time.Second
)
