// Package harness builds the real binaries and runs agentic-mgmt with host
// agents on loopback, for the end-to-end tests and the benchmarks.
package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// Binaries are the built executables.
type Binaries struct {
	Mgmt, Agent, Ctl string
}

// Build compiles ./cmd/... of the module containing this package into dir.
func Build(ctx context.Context, dir string) (Binaries, error) {
	root, err := ModuleRoot()
	if err != nil {
		return Binaries{}, err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+"/", "./cmd/agentic-mgmt", "./cmd/agentic-agent", "./cmd/agenticctl")
	cmd.Dir = root
	// Static: the agent binary is mounted into containers and VMs with no libc.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("go build: %v\n%s", err, out)
	}
	return binariesIn(dir), nil
}

func binariesIn(dir string) Binaries {
	return Binaries{
		Mgmt:  filepath.Join(dir, "agentic-mgmt"),
		Agent: filepath.Join(dir, "agentic-agent"),
		Ctl:   filepath.Join(dir, "agenticctl"),
	}
}

// BuildShared is Build once per content of the module: the binaries live in
// build/test-bin/<key>, key a hash of the module's files and the toolchain,
// and every test package (each its own process, run side by side by go
// test) uses the same ones. The first to ask builds under a file lock; the
// others wait for it rather than compile the same packages beside it (a
// cold build is minutes of CPU on a small machine).
func BuildShared(ctx context.Context) (Binaries, error) {
	root, err := ModuleRoot()
	if err != nil {
		return Binaries{}, err
	}
	key, err := buildKey(ctx, root)
	if err != nil {
		return Binaries{}, err
	}
	cache := filepath.Join(root, "build", "test-bin")
	dir := filepath.Join(cache, key)
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return Binaries{}, err
	}
	lock, err := os.OpenFile(filepath.Join(cache, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return Binaries{}, err
	}
	defer lock.Close() // releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return Binaries{}, err
	}
	now := time.Now()
	if _, err := os.Stat(dir); err == nil {
		_ = os.Chtimes(dir, now, now) // in use: not pruned
		return binariesIn(dir), nil
	}
	pruneBuilds(cache, now)
	tmp, err := os.MkdirTemp(cache, ".building-")
	if err != nil {
		return Binaries{}, err
	}
	defer os.RemoveAll(tmp) // only what a failed build left
	if _, err := Build(ctx, tmp); err != nil {
		return Binaries{}, err
	}
	// Whole or absent: a build cut short never stands under the key.
	if err := os.Rename(tmp, dir); err != nil {
		return Binaries{}, err
	}
	return binariesIn(dir), nil
}

// pruneBuilds removes the builds of other contents not used for an hour
// (a test run is over long before; the timeout is 20 minutes).
func pruneBuilds(cache string, now time.Time) {
	entries, _ := os.ReadDir(cache)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && e.IsDir() && now.Sub(fi.ModTime()) > time.Hour {
			_ = os.RemoveAll(filepath.Join(cache, e.Name()))
		}
	}
}

// buildKey hashes what the binaries are built from: the toolchain and its
// settings, and every file of the module but tests, test data and what
// builds and tools leave (a change anywhere else rebuilds, which the go
// build cache makes cheap).
func buildKey(ctx context.Context, root string) (string, error) {
	h := sha256.New()
	env, err := exec.CommandContext(ctx, "go", "env", "GOVERSION", "GOOS", "GOARCH", "GOFLAGS", "GOEXPERIMENT", "GOAMD64", "GOTOOLCHAIN").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	h.Write(env)
	skipDirs := map[string]bool{".git": true, "build": true, "bin": true, ".state": true, "node_modules": true, "testdata": true}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && skipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasSuffix(p, "_test.go") || strings.HasSuffix(p, ".test") {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		rel, _ := filepath.Rel(root, p)
		fmt.Fprintf(h, "%s\x00", rel)
		_, err = io.Copy(h, f)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("hashing the module: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// ModuleRoot is the directory holding go.mod.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the module")
	}
	return filepath.Dir(mod), nil
}

// FreeBasePort finds a port p with p, p+1 and p+2 free on 127.0.0.1.
func FreeBasePort() (int, error) { return FreeBasePortOn("127.0.0.1") }

// FreeBasePortOn finds a port p free on the first host with p+1 and p+2
// free on every host.
func FreeBasePortOn(hosts ...string) (int, error) {
	for range 50 {
		ln, err := net.Listen("tcp", net.JoinHostPort(hosts[0], "0"))
		if err != nil {
			return 0, err
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if p > 65000 {
			continue
		}
		ok := true
		for d := 1; d <= 2 && ok; d++ {
			for _, h := range hosts {
				l, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(p+d)))
				if err != nil {
					ok = false
					break
				}
				l.Close()
			}
		}
		if ok {
			return p, nil
		}
	}
	return 0, errors.New("no three consecutive free ports")
}

// Options for a server.
type Options struct {
	HostAgents int
	// DataDir is reused across restarts of the same server.
	DataDir string
	// BasePort is LISTEN_ADDR's port; 0 picks a free one.
	BasePort int
	// Env is added to the server's environment (a later entry wins). A
	// LISTEN_ADDR of port 0 there (e.g. 0.0.0.0:0, as the kubernetes
	// engine gives) listens on that host at the base port.
	Env  []string
	Args []string
}

// Server is a running agentic-mgmt.
type Server struct {
	Bins     Binaries
	Opts     Options
	Cmd      *exec.Cmd
	AgentURL string
	RESTURL  string
	Token    string
	DataDir  string
	log      *testkit.Buffer
	waitErr  chan error
}

// AgentAddr is the agent port's host:port (AgentURL without its scheme,
// http or https).
func (s *Server) AgentAddr() string {
	_, addr, _ := strings.Cut(s.AgentURL, "://")
	return addr
}

// Start runs agentic-mgmt and waits until its REST port answers.
func Start(bins Binaries, opts Options) (*Server, error) {
	listenHost := "127.0.0.1"
	if h, port, err := net.SplitHostPort(lastEnv(opts.Env, "LISTEN_ADDR")); err == nil && port == "0" {
		listenHost = h
	}
	if opts.BasePort == 0 {
		p, err := FreeBasePortOn(listenHost)
		if err != nil {
			return nil, err
		}
		opts.BasePort = p
	}
	if opts.DataDir == "" {
		return nil, errors.New("harness: DataDir is required")
	}
	listen := net.JoinHostPort(listenHost, strconv.Itoa(opts.BasePort))
	// The agent port speaks TLS off loopback unless told otherwise (as
	// agentic-mgmt's AGENTIC_AGENT_TLS default does).
	agentScheme := "http"
	if tls := lastEnv(opts.Env, "AGENTIC_AGENT_TLS"); tls != "off" && (tls != "" || !net.ParseIP(listenHost).IsLoopback()) {
		agentScheme = "https"
	}
	s := &Server{
		Bins:     bins,
		Opts:     opts,
		AgentURL: fmt.Sprintf("%s://127.0.0.1:%d", agentScheme, opts.BasePort),
		RESTURL:  fmt.Sprintf("http://127.0.0.1:%d", opts.BasePort+2),
		DataDir:  opts.DataDir,
		log:      &testkit.Buffer{},
		waitErr:  make(chan error, 1),
	}
	cmd := exec.Command(bins.Mgmt, append([]string{"--config", "/nonexistent"}, opts.Args...)...)
	cmd.Env = append(os.Environ(),
		"LISTEN_ADDR="+listen,
		"SECRETS_DIR="+filepath.Join(opts.DataDir, "secrets"),
		"AGENTIC_HOST_AGENTS="+strconv.Itoa(opts.HostAgents),
		"AGENTIC_AGENT_BINARY="+bins.Agent,
		// The machine's own Docker or libvirt daemons are not the tests'
		// unless a test says so (a later entry wins).
		"AGENTIC_RUNTIMES=host",
	)
	if os.Geteuid() == 0 {
		// Tests hand host agents files in their own temp dirs, which a
		// dedicated user could not read; the one test of that user sets it.
		cmd.Env = append(cmd.Env, "AGENTIC_HOST_USER=root")
	}
	cmd.Env = append(cmd.Env, opts.Env...)
	if listenHost != "127.0.0.1" {
		cmd.Env = append(cmd.Env, "LISTEN_ADDR="+listen) // over Env's port 0
	}
	// Host agents that run as the server start where it does: not in the
	// test's package directory, where relative paths would write. The
	// server makes its data dir as it would (0700); it may not exist yet.
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, err
	}
	cmd.Dir = opts.DataDir
	cmd.Stdout = s.log
	cmd.Stderr = s.log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s.Cmd = cmd
	go func() { s.waitErr <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.RESTURL + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case err := <-s.waitErr:
			return nil, fmt.Errorf("agentic-mgmt exited early: %v\n%s", err, s.Log())
		default:
		}
		if time.Now().After(deadline) {
			s.Kill()
			return nil, fmt.Errorf("agentic-mgmt did not answer in time\n%s", s.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	tok, err := os.ReadFile(filepath.Join(opts.DataDir, "operator-token"))
	if err != nil {
		s.Kill()
		return nil, fmt.Errorf("operator token: %w", err)
	}
	s.Token = strings.TrimSpace(string(tok))
	return s, nil
}

// lastEnv is the value the last KEY=VALUE of env gives key, "" for none.
func lastEnv(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// Client is a generated REST client authenticated as the operator.
func (s *Server) Client() *restapi.ClientWithResponses {
	c, err := restapi.NewClientWithResponses(s.RESTURL, restapi.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+s.Token)
		return nil
	}))
	if err != nil {
		panic(err) // only fails on a malformed URL, which Start built
	}
	return c
}

// WaitAgents waits until each id is connected (status ready, or busy with
// commands or sessions).
func (s *Server) WaitAgents(ctx context.Context, ids ...string) error {
	c := s.Client()
	for {
		resp, err := c.ListAgentsWithResponse(ctx, nil)
		if err == nil && resp.JSON200 != nil {
			ready := map[string]bool{}
			for _, a := range resp.JSON200.Agents {
				if a.Status == restapi.Ready || a.Status == restapi.Busy {
					ready[a.Id] = true
				}
			}
			all := true
			for _, id := range ids {
				all = all && ready[id]
			}
			if all {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agents %v not ready: %w\n%s", ids, ctx.Err(), s.Log())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop sends sig and waits for the process to exit.
func (s *Server) Stop(sig syscall.Signal, timeout time.Duration) (exitErr error, err error) {
	_ = s.Cmd.Process.Signal(sig)
	select {
	case e := <-s.waitErr:
		return e, nil
	case <-time.After(timeout):
		s.Kill()
		return nil, fmt.Errorf("agentic-mgmt did not exit within %v after %v", timeout, sig)
	}
}

// Kill stops the server at once (SIGKILL).
func (s *Server) Kill() {
	_ = s.Cmd.Process.Kill()
	select {
	case <-s.waitErr:
	case <-time.After(5 * time.Second):
	}
}

// Log is everything the server printed.
func (s *Server) Log() string { return s.log.String() }

// HostAgentPIDs reads the supervisor's pid files.
func HostAgentPIDs(dataDir string) map[string]int {
	out := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(dataDir, "host-agents", "*.pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		out[strings.TrimSuffix(filepath.Base(f), ".pid")] = pid
	}
	return out
}

// KillHostAgents kills the host agents of dataDir and their process groups,
// the supervisor's and the host runtime's environments' (warm pool members
// too); they outlive agentic-mgmt by design, so tests must clean them up.
func KillHostAgents(dataDir string) {
	envPIDs, _ := filepath.Glob(filepath.Join(dataDir, "host-envs", "*", "agent.pid"))
	for _, f := range envPIDs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// Only a live agentic-agent: the pid of an agent that died long
		// ago may be someone else's now.
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 1 {
			continue
		}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || filepath.Base(exe) != "agentic-agent" {
			continue
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for id, pid := range HostAgentPIDs(dataDir) {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		// Sessions kept in tmux outlive their agent by design.
		dir := hostsup.AgentTmpDir(filepath.Join(dataDir, "host-agents", id+".pid"))
		hostsup.EndTmux(context.Background(), dir, nil)
		_ = os.RemoveAll(dir)
	}
	// A root server's agents have users of their own: end whatever of
	// theirs is left (tmux servers, commands), and free their uids.
	users := filepath.Join(dataDir, "host-users.json")
	_ = hostsup.EndUsers(users)
	_ = hostsup.ReleaseAll(users)
}

// Alive reports whether pid is a live (non-zombie) process.
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	st := b[i+2]
	return st != 'Z' && st != 'X'
}
