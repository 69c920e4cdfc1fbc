// Package docker is the "docker" runtime: every environment is one container
// on a Docker engine whose only process is the static agentic-agent.
//
// Any image works unchanged: the agent binary is bind-mounted read-only at
// /opt/agentic/agentic-agent and is the entrypoint (behind the engine's tiny
// init, which reaps the orphans of the commands the agent runs). Without an
// image the adapter uses agentic-sandbox/base:busybox, imported once from the
// host's static busybox, so no registry is ever needed.
//
// Network: "none" by default. The agent still reaches the server through the
// directory of the agent-link socket, mounted read-only at /run/agentic; the
// directory rather than the socket file, so that a restarted server's new
// socket (a new inode) is seen by the running agents. Keep that directory for
// the socket alone: every environment can read it. "host" uses the server's
// TCP URL; "bridge" needs a daemon with a bridge network.
//
// Hardening: all capabilities dropped but setuid, setgid and kill, which
// the agent (uid 0 in the container) needs to run and signal its commands
// as nobody (65534:65534, HOME=/tmp), who get none; no-new-privileges, a
// pids limit (512 unless set), memory (no extra swap) and CPU limits from
// the spec, and a read-only root with a tmpfs /tmp when asked. The agent's
// secret is a root-only file mounted read-only, so its commands cannot read
// it. The "root" profile runs the commands as uid 0 (still without
// capabilities) for images that need it. The socket is 0666.
//
// Tiers: an environment whose spec asks for ports.TierGVisor runs under
// dockerd's runtime named "runsc" (gVisor), offered only while dockerd has
// one (its runtimes are read at Ping, when the server starts). The agent
// reaches the server through the mounted socket directory, which gVisor
// allows only when runsc runs with --host-uds=open (or all): a runsc
// registered with runtimeArgs lacking it gets a spec that needs the socket
// refused rather than an agent that never registers.
//
// Ownership: containers carry io.agentic-sandbox.managed=true,
// io.agentic-sandbox.owner=<Config.Owner> and io.agentic-sandbox.env=<name>.
// Every lookup filters on all three, so the adapter never sees or touches a
// container it did not make, nor one of another server sharing the daemon.
package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Labels on every container the adapter makes.
const (
	LabelManaged = "io.agentic-sandbox.managed"
	LabelOwner   = "io.agentic-sandbox.owner"
	LabelEnv     = "io.agentic-sandbox.env"
	// LabelProvision is unique per Provision call, to find a container whose
	// create reply was lost (ctx cancelled) without touching a namesake.
	LabelProvision = "io.agentic-sandbox.provision"
	// LabelNetwork keeps the network mode asked for where the engine's
	// differs (proxy runs on the engine's none).
	LabelNetwork = "io.agentic-sandbox.network"
	// LabelUserPrefix prefixes the spec's own labels, keeping them apart from
	// the image's labels and from the adapter's.
	LabelUserPrefix = "io.agentic-sandbox.label."
)

// RuntimeName is this runtime's catalog name, Capabilities().Runtime and Environment.Runtime.
const RuntimeName = "docker"

// Paths inside the container.
const (
	AgentPath = "/opt/agentic/agentic-agent"
	// SecretPath is the agent's secret: root's, 0400, read-only; commands
	// run as another user and cannot read it.
	SecretPath = "/run/agentic-secret" //nolint:gosec // a path, not a credential
	SocketDir  = "/run/agentic"
	// IdentityPath is where the agent keeps the identity a rename gave it
	// (root's, 0600, in a directory of root's alone): the writable layer,
	// or with a read-only root a host directory beside the secret
	// (identityDir), so that a stop or a hibernation keeps it either way.
	IdentityPath = "/run/agentic-agent/identity"
	DefaultTag   = "agentic-sandbox/base:busybox"
)

// Profiles: who the agent runs as.
const (
	ProfileDefault = "default"
	ProfileRoot    = "root"
)

const (
	defaultOwner = "default"
	nobody       = "65534:65534"
)

// GVisorRuntime is the name of dockerd's runtime that runs ports.TierGVisor
// (daemon.json's "runtimes", or dockerd --add-runtime runsc=PATH).
const GVisorRuntime = "runsc"

var ownerRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,30}$`)

// Config says which engine to use and how environments are made.
type Config struct {
	// Host is the engine address (unix:///var/run/docker.sock); empty
	// means DOCKER_HOST or the default socket. The engine must run on this
	// machine: the agent binary and socket are bind-mounted by host path.
	Host string
	// Owner tells this server's containers from another's on the same
	// daemon ([a-z0-9-], default "default").
	Owner string
	// Busybox is a static busybox for the default image; empty looks in
	// /bin and /usr/bin.
	Busybox string
	// PullMissing pulls a spec's image the engine lacks; otherwise such a
	// spec is refused (ErrInvalidSpec).
	PullMissing bool
	// Defaults fill the zero fields of a spec's Resources (PIDs 512 if unset).
	Defaults ports.Resources
	// StopTimeout is how long Stop waits before SIGKILL (default 10 s).
	StopTimeout time.Duration
	// NoInit runs the agent as pid 1 instead of behind the engine's init.
	NoInit bool
	// SecretDir holds each environment's agent secret (0400), bind-mounted
	// read-only into its container; default <temp dir>/agentic-docker-<owner>.
	SecretDir string
	// Logger hears the checkpoint probe's outcome (default slog.Default()).
	Logger *slog.Logger
}

// Runtime is the Docker adapter; safe for concurrent use.
type Runtime struct {
	cfg Config
	cli *client.Client

	imageMu sync.Mutex // one default-image build at a time

	negMu      sync.Mutex
	negotiated atomic.Bool

	// engine is what dockerd said of its runtimes at the last Ping (nil
	// before the first that answered).
	engine atomic.Pointer[engineRuntimes]
	// criu is the checkpoint probe of the engine (criu.go).
	criu atomic.Pointer[criuState]
}

// engineRuntimes is what the adapter makes of dockerd's runtimes.
type engineRuntimes struct {
	tiers []string
	// gvisorSocket: runsc may connect to the host's unix sockets (the
	// agent-link socket), or its registration does not say (a shim v2
	// runtime keeps its flags in its own config).
	gvisorSocket bool
	// id, experimental and rootDir are the engine's: which one it is,
	// whether it checkpoints (dockerd --experimental), and where its
	// checkpoints are kept.
	id           string
	experimental bool
	rootDir      string
}

var _ ports.Runtime = (*Runtime)(nil)

// New makes the adapter; it does not contact the engine (see Ping).
func New(cfg Config) (*Runtime, error) {
	if cfg.Owner == "" {
		cfg.Owner = defaultOwner
	}
	if !ownerRE.MatchString(cfg.Owner) {
		return nil, fmt.Errorf("docker: owner %q: want [a-z0-9-], at most 31 characters", cfg.Owner)
	}
	if cfg.Defaults.PIDs == 0 {
		cfg.Defaults.PIDs = 512
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 10 * time.Second
	}
	if cfg.SecretDir == "" {
		cfg.SecretDir = filepath.Join(os.TempDir(), "agentic-docker-"+cfg.Owner)
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if cfg.Host != "" {
		opts = append(opts, client.WithHost(cfg.Host))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	return &Runtime{cfg: cfg, cli: cli}, nil
}

// Close releases the engine connection.
func (r *Runtime) Close() error { return r.cli.Close() }

// ContainerName is the engine's name for an environment. The owner is part
// of it (after a dot, which owners cannot contain) so that two servers can
// both have an environment called "dev".
func (r *Runtime) ContainerName(name string) string {
	if r.cfg.Owner == defaultOwner {
		return "agentic-" + name
	}
	return "agentic-" + r.cfg.Owner + "." + name
}

// Capabilities implements ports.Runtime.
func (r *Runtime) Capabilities() ports.RuntimeCapabilities {
	return ports.RuntimeCapabilities{
		Runtime:      RuntimeName,
		Isolation:    ports.KindContainer,
		Pause:        true,
		Hibernate:    r.hibernateMode(), // criu.go, hibernate.go
		NetworkModes: []ports.NetworkMode{ports.NetworkNone, ports.NetworkProxy, ports.NetworkHost, ports.NetworkBridge},
		Limits:       []ports.Limit{ports.LimitCPUs, ports.LimitMemoryMB, ports.LimitPIDs},
		ReadOnlyRoot: true,
		Images:       true,
		Profiles:     []string{ProfileDefault, ProfileRoot},
		Tiers:        r.tiers(),
	}
}

// tiers are the tiers dockerd's runtimes offer, as of the last Ping.
func (r *Runtime) tiers() []string {
	if e := r.engine.Load(); e != nil {
		return e.tiers
	}
	return nil
}

// readRuntimes reads dockerd's runtimes (docker info). An engine that
// answers Ping but not this keeps what was read before.
func (r *Runtime) readRuntimes(ctx context.Context) {
	info, err := r.cli.Info(ctx)
	if err != nil {
		return
	}
	e := &engineRuntimes{id: info.ID, experimental: info.ExperimentalBuild, rootDir: info.DockerRootDir}
	if rt, ok := info.Runtimes[GVisorRuntime]; ok {
		e.tiers = []string{ports.TierGVisor}
		e.gvisorSocket = rt.Type != "" || HostUDSAllowed(rt.Args)
	}
	r.engine.Store(e)
	r.maybeProbe(e)
}

// hostUDS matches runsc's flag letting a sandbox connect to the host's unix
// sockets: --host-uds=open or all (a value of its own word, too), or the
// older --fsgofer-host-uds.
var hostUDS = regexp.MustCompile(`(^|\s)--?(host-uds(=|\s+)(open|all)|fsgofer-host-uds(=true)?)(\s|$)`)

// HostUDSAllowed reports whether runsc run with args lets the sandbox
// connect to a host unix socket mounted into it.
func HostUDSAllowed(args []string) bool {
	return hostUDS.MatchString(strings.Join(args, " "))
}

// Ping implements ports.Runtime.
func (r *Runtime) Ping(ctx context.Context) error {
	ping, err := r.cli.Ping(ctx)
	if err != nil {
		return fmt.Errorf("docker ping: %w: %w", ports.ErrRuntimeUnavailable, err)
	}
	r.negotiate(ping)
	r.readRuntimes(ctx)
	return nil
}

// ready settles the API version before the first real call. When the SDK's
// lazy negotiation fails (engine down), its calls go ahead with its own
// newer version, which a 1.41 daemon refuses, and read it unlocked while
// another call negotiates (a data race). Negotiated once up front, here,
// later calls only read it.
func (r *Runtime) ready(ctx context.Context) error {
	if r.negotiated.Load() {
		return nil
	}
	return r.Ping(ctx)
}

func (r *Runtime) negotiate(ping types.Ping) {
	if r.negotiated.Load() {
		return
	}
	r.negMu.Lock()
	defer r.negMu.Unlock()
	if !r.negotiated.Load() {
		r.cli.NegotiateAPIVersionPing(ping)
		r.negotiated.Store(true)
	}
}

// engineErr wraps an engine error, marking an unreachable engine.
func engineErr(op string, err error) error {
	if client.IsErrConnectionFailed(err) {
		return fmt.Errorf("docker %s: %w: %w", op, ports.ErrRuntimeUnavailable, err)
	}
	return fmt.Errorf("docker %s: %w", op, err)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ports.ErrInvalidSpec, fmt.Sprintf(format, args...))
}

// plan is a validated spec turned into what the engine is given.
type plan struct {
	spec     ports.EnvironmentSpec
	network  ports.NetworkMode
	server   string // MANAGEMENT_SERVER for the agent
	sockDir  string // host directory mounted at SocketDir, "" if none
	user     string
	res      ports.Resources
	provisID string
}

func (r *Runtime) validate(spec ports.EnvironmentSpec) (plan, error) {
	p := plan{spec: spec}
	if err := r.Capabilities().CheckSpec(spec); err != nil {
		return p, err
	}
	if spec.Agent.Binary == "" {
		return p, invalid("no agent binary")
	}
	// The engine wants absolute bind sources.
	if abs, err := filepath.Abs(spec.Agent.Binary); err == nil {
		p.spec.Agent.Binary = abs
	}
	if fi, err := os.Stat(p.spec.Agent.Binary); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o005 != 0o005 {
		return p, invalid("agent binary %s: not a regular file everyone may read and run", spec.Agent.Binary)
	}
	if static, err := isStatic(p.spec.Agent.Binary); err != nil || !static {
		return p, invalid("agent binary %s: not a static executable (build it with CGO_ENABLED=0): images need not have a libc", spec.Agent.Binary)
	}
	p.user = nobody
	if spec.Profile == ProfileRoot {
		p.user = "0:0"
	}

	p.network = spec.Network
	if p.network == "" {
		p.network = ports.NetworkNone
	}
	useSocket := func() error {
		if spec.Agent.Socket == "" {
			return invalid("network %s needs the agent-link socket", p.network)
		}
		dir, err := filepath.Abs(filepath.Dir(spec.Agent.Socket))
		if err != nil {
			return invalid("agent socket directory: %v", err)
		}
		fi, err := os.Stat(dir)
		if err != nil {
			return invalid("agent socket directory: %v", err)
		}
		// The agent is root without capabilities: it passes only what root
		// owns or others may search; an untraversable directory would leave
		// it retrying forever instead of failing here.
		if st, ok := fi.Sys().(*syscall.Stat_t); (!ok || st.Uid != 0) && fi.Mode().Perm()&0o001 == 0 {
			return invalid("agent socket directory %s is not searchable by other users (chmod o+x)", dir)
		}
		p.sockDir = dir
		p.server = "unix://" + SocketDir + "/" + filepath.Base(spec.Agent.Socket)
		return nil
	}
	switch p.network {
	case ports.NetworkNone, ports.NetworkProxy:
		if err := useSocket(); err != nil {
			return p, err
		}
	case ports.NetworkHost:
		// Loopback TCP reaches the server from the host's network namespace.
		if spec.Agent.ServerURL != "" {
			p.server = spec.Agent.ServerURL
		} else if err := useSocket(); err != nil {
			return p, err
		}
	case ports.NetworkBridge:
		// The server's URL is usually loopback, which a bridged container
		// cannot reach; the socket works on any network.
		if spec.Agent.Socket != "" {
			if err := useSocket(); err != nil {
				return p, err
			}
		} else if spec.Agent.ServerURL != "" {
			p.server = spec.Agent.ServerURL
		} else {
			return p, invalid("no way back to the management server")
		}
	}

	if spec.Tier == ports.TierGVisor && p.sockDir != "" {
		if e := r.engine.Load(); e != nil && !e.gvisorSocket {
			return p, invalid("isolation gvisor with network %s: the agent reaches the server through the mounted socket, "+
				"which dockerd's %s runtime does not let a sandbox connect to (register it with runtimeArgs [\"--host-uds=open\"])", p.network, GVisorRuntime)
		}
	}

	res := spec.Resources
	if res.CPUs == 0 {
		res.CPUs = r.cfg.Defaults.CPUs
	}
	if res.MemoryMB == 0 {
		res.MemoryMB = r.cfg.Defaults.MemoryMB
	}
	if res.PIDs == 0 {
		res.PIDs = r.cfg.Defaults.PIDs
	}
	p.res = res
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	p.provisID = hex.EncodeToString(b)
	return p, nil
}

func (r *Runtime) ownerFilter() filters.Args {
	return filters.NewArgs(
		filters.Arg("label", LabelManaged+"=true"),
		filters.Arg("label", LabelOwner+"="+r.cfg.Owner),
	)
}

// find returns the id of this server's container for name, or ErrEnvNotFound.
func (r *Runtime) find(ctx context.Context, name string) (string, error) {
	if err := r.ready(ctx); err != nil {
		return "", err
	}
	f := r.ownerFilter()
	f.Add("label", LabelEnv+"="+name)
	list, err := r.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return "", engineErr("list", err)
	}
	switch len(list) {
	case 0:
		return "", fmt.Errorf("%w: %s", ports.ErrEnvNotFound, name)
	case 1:
		return list[0].ID, nil
	}
	// Only a hand-made copy of our labels gets here: the container name is
	// unique per owner. Prefer the one under our name.
	want := "/" + r.ContainerName(name)
	for _, c := range list {
		for _, n := range c.Names {
			if n == want {
				return c.ID, nil
			}
		}
	}
	return list[0].ID, nil
}

// Provision implements ports.Runtime: image, create, start.
func (r *Runtime) Provision(ctx context.Context, spec ports.EnvironmentSpec) (ports.Environment, error) {
	if spec.Tier != "" && r.engine.Load() == nil {
		// The tiers are dockerd's runtimes: read them before the check.
		if err := r.Ping(ctx); err != nil {
			return ports.Environment{}, err
		}
	}
	p, err := r.validate(spec)
	if err != nil {
		return ports.Environment{}, err
	}
	progress := func(step string) {
		if spec.Progress != nil {
			spec.Progress(step)
		}
	}
	if _, err := r.find(ctx, spec.Name); err == nil {
		return ports.Environment{}, fmt.Errorf("%w: %s", ports.ErrEnvExists, spec.Name)
	} else if !errors.Is(err, ports.ErrEnvNotFound) {
		return ports.Environment{}, err
	}

	if p.network == ports.NetworkBridge {
		// A daemon started with --bridge=none gives "bridge" containers no
		// network at all instead of refusing them.
		if _, err := r.cli.NetworkInspect(ctx, "bridge", network.InspectOptions{}); cerrdefs.IsNotFound(err) {
			return ports.Environment{}, invalid("the engine has no bridge network")
		} else if err != nil {
			return ports.Environment{}, engineErr("network inspect", err)
		}
	}

	progress("image")
	image, err := r.ensureImage(ctx, spec.Image)
	if err != nil {
		return ports.Environment{}, err
	}

	progress("create")
	// The secret goes in a file only the agent's user can read, never in
	// the environment, which the container's init and `docker inspect` show.
	secretFile := r.secretFile(spec.Name)
	if err := os.MkdirAll(r.cfg.SecretDir, 0o700); err != nil {
		return ports.Environment{}, fmt.Errorf("docker: secret dir: %w", err)
	}
	if err := fsatomic.WriteFile(secretFile, []byte(spec.Agent.Secret+"\n"), 0o400); err != nil {
		return ports.Environment{}, fmt.Errorf("docker: agent secret: %w", err)
	}
	provisioned := false
	defer func() {
		if !provisioned {
			_ = os.Remove(secretFile)
			_ = os.RemoveAll(r.identityDir(spec.Name))
		}
	}()
	if spec.ReadOnlyRoot {
		_ = os.RemoveAll(r.identityDir(spec.Name)) // an earlier namesake's
		if err := os.Mkdir(r.identityDir(spec.Name), 0o700); err != nil {
			return ports.Environment{}, fmt.Errorf("docker: identity dir: %w", err)
		}
	}
	cfg, host := r.containerConfig(p, image)
	created, err := r.cli.ContainerCreate(ctx, cfg, host, nil, nil, r.ContainerName(spec.Name))
	if err != nil {
		if cerrdefs.IsConflict(err) {
			return ports.Environment{}, fmt.Errorf("%w: %s (container %s: %v)", ports.ErrEnvExists, spec.Name, r.ContainerName(spec.Name), err)
		}
		r.removeOrphan(p.provisID)
		// The image was checked; what is not found is the network.
		if cerrdefs.IsInvalidArgument(err) || cerrdefs.IsNotFound(err) {
			return ports.Environment{}, fmt.Errorf("%w: %w", ports.ErrInvalidSpec, err)
		}
		return ports.Environment{}, engineErr("create", err)
	}

	progress("start")
	if err := r.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		r.remove(created.ID)
		if cerrdefs.IsInvalidArgument(err) {
			return ports.Environment{}, fmt.Errorf("%w: %w", ports.ErrInvalidSpec, err)
		}
		return ports.Environment{}, engineErr("start", err)
	}
	env, err := r.inspectID(ctx, created.ID, spec.Name)
	if err != nil {
		r.remove(created.ID)
		return ports.Environment{}, err
	}
	provisioned = true
	return env, nil
}

// cleanupTimeout bounds removing what a failed Provision made; it runs
// on its own context because the caller's may be what failed.
const cleanupTimeout = 30 * time.Second

func (r *Runtime) remove(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = r.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
}

// removeOrphan removes a container a failed create may still have made.
func (r *Runtime) removeOrphan(provisID string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	f := r.ownerFilter()
	f.Add("label", LabelProvision+"="+provisID)
	list, err := r.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return
	}
	for _, c := range list {
		_ = r.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	}
}

func (r *Runtime) containerConfig(p plan, image string) (*container.Config, *container.HostConfig) {
	spec := p.spec
	labels := map[string]string{
		LabelManaged:   "true",
		LabelOwner:     r.cfg.Owner,
		LabelEnv:       spec.Name,
		LabelProvision: p.provisID,
		LabelNetwork:   string(p.network),
	}
	for k, v := range spec.Labels {
		labels[LabelUserPrefix+k] = v
	}
	env := []string{
		"AGENT_ID=" + spec.Name,
		"AGENT_SECRET_FILE=" + SecretPath,
		"MANAGEMENT_SERVER=" + p.server,
		"AGENT_RUNTIME=" + string(ports.KindContainer),
		// The agent socket is a real listener: files and tunnels get a
		// connection of their own beside the control stream.
		"MANAGEMENT_BULK_CONNECTION=1",
		// Where a rename (a pool member taken) is kept: the container's
		// writable layer, or a read-only root's host directory, outlives
		// a stop and a hibernation.
		"AGENT_IDENTITY_FILE=" + IdentityPath,
	}
	if p.network == ports.NetworkProxy {
		// No network device: the agent's proxy on the container's own
		// loopback is the way out, through the agent link.
		env = append(env, "AGENT_EGRESS_PROXY="+ports.EgressProxyAddr)
	}
	if p.user == nobody {
		// The agent stays root with only what starting processes as nobody
		// takes; its commands run as nobody, with no capabilities at all.
		// nobody has no home in most images (/nonexistent, or none); /tmp
		// is always writable: it is their home and working directory,
		// where relative file paths start, whatever the image's passwd
		// says (AGENT_RUN_AS_HOME).
		env = append(env, "AGENT_RUN_AS="+nobody, "AGENT_RUN_AS_HOME=/tmp", "HOME=/tmp")
	}
	stopSecs := int((r.cfg.StopTimeout + time.Second - 1) / time.Second)
	cfg := &container.Config{
		Image: image,
		User:  "0:0",
		Env:   env,
		// Setting the entrypoint also drops the image's CMD, which would
		// otherwise become the agent's arguments.
		Entrypoint: []string{AgentPath},
		Labels:     labels,
		// The image's stop signal and health check were meant for its own
		// entrypoint, not the agent: the agent ends cleanly on SIGTERM, and
		// a check would run unasked commands in the environment.
		StopSignal:  "SIGTERM",
		Healthcheck: &container.HealthConfig{Test: []string{"NONE"}},
		// Also for stops the server does not ask for (a daemon shutdown).
		StopTimeout: &stopSecs,
	}
	if p.network != ports.NetworkHost {
		cfg.Hostname = spec.Name
	}

	mounts := []mount.Mount{{
		Type: mount.TypeBind, Source: spec.Agent.Binary, Target: AgentPath, ReadOnly: true,
	}, {
		Type: mount.TypeBind, Source: r.secretFile(spec.Name), Target: SecretPath, ReadOnly: true,
	}}
	if spec.ReadOnlyRoot {
		// The read-only root's one writable place that outlives a stop.
		mounts = append(mounts, mount.Mount{
			Type: mount.TypeBind, Source: r.identityDir(spec.Name), Target: path.Dir(IdentityPath),
		})
	}
	if p.sockDir != "" {
		mounts = append(mounts, mount.Mount{
			Type: mount.TypeBind, Source: p.sockDir, Target: SocketDir, ReadOnly: true,
		})
	}
	pids := int64(p.res.PIDs)
	host := &container.HostConfig{
		NetworkMode:    engineNetwork(p.network),
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
		CapDrop:        []string{"ALL"},
		CapAdd:         agentCaps(p.user),
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: spec.ReadOnlyRoot,
		Mounts:         mounts,
		Resources: container.Resources{
			NanoCPUs:  int64(p.res.CPUs * 1e9),
			PidsLimit: &pids,
		},
	}
	if p.res.MemoryMB > 0 {
		host.Memory = int64(p.res.MemoryMB) << 20
		host.MemorySwap = host.Memory // no swap beyond the limit
	}
	if spec.ReadOnlyRoot {
		host.Tmpfs = map[string]string{"/tmp": "rw,nosuid,nodev,mode=1777"}
	}
	if !r.cfg.NoInit {
		init := true
		host.Init = &init
	}
	if spec.Tier == ports.TierGVisor {
		host.Runtime = GVisorRuntime
	}
	return cfg, host
}

// Start implements ports.Runtime; a paused environment is resumed.
func (r *Runtime) Start(ctx context.Context, name string) error {
	id, err := r.find(ctx, name)
	if err != nil {
		return err
	}
	c, err := r.cli.ContainerInspect(ctx, id)
	if err != nil {
		return r.idErr("inspect", name, err)
	}
	if c.State != nil && c.State.Paused {
		return r.idErr("unpause", name, r.cli.ContainerUnpause(ctx, id))
	}
	if err := r.idErr("start", name, r.cli.ContainerStart(ctx, id, container.StartOptions{})); err != nil {
		return err
	}
	// A hibernated environment started is awake, afresh: a checkpoint of
	// its memory is spent.
	if m, err := r.readMarker(name); err == nil && m.Mode == ports.HibernateMemory && m.Container == id {
		r.deleteCheckpoint(ctx, id, m.Checkpoint)
	}
	return r.removeMarker(name)
}

// Stop implements ports.Runtime: SIGTERM, then SIGKILL after StopTimeout.
func (r *Runtime) Stop(ctx context.Context, name string) error {
	id, err := r.find(ctx, name)
	if err != nil {
		return err
	}
	// A paused container would sit out the whole timeout before the kill.
	if c, err := r.cli.ContainerInspect(ctx, id); err == nil && c.State != nil && c.State.Paused {
		if err := r.cli.ContainerUnpause(ctx, id); err != nil {
			return r.idErr("unpause", name, err)
		}
	}
	secs := int((r.cfg.StopTimeout + time.Second - 1) / time.Second)
	return r.idErr("stop", name, r.cli.ContainerStop(ctx, id, container.StopOptions{Timeout: &secs}))
}

// Pause freezes an environment's processes (cgroup freezer).
func (r *Runtime) Pause(ctx context.Context, name string) error {
	id, err := r.find(ctx, name)
	if err != nil {
		return err
	}
	return r.idErr("pause", name, r.cli.ContainerPause(ctx, id))
}

// Resume thaws a paused environment.
func (r *Runtime) Resume(ctx context.Context, name string) error {
	id, err := r.find(ctx, name)
	if err != nil {
		return err
	}
	return r.idErr("unpause", name, r.cli.ContainerUnpause(ctx, id))
}

// Destroy implements ports.Runtime: a forced remove with its anonymous
// volumes, its secret and its hibernation marker.
func (r *Runtime) Destroy(ctx context.Context, name string) error {
	id, err := r.find(ctx, name)
	if errors.Is(err, ports.ErrEnvNotFound) {
		// Removed behind the server's back: what was kept for it goes too.
		if ferr := r.removeFiles(name); ferr != nil {
			return ferr
		}
	}
	if err != nil {
		return err
	}
	if err := r.idErr("remove", name, r.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})); err != nil {
		return err
	}
	return r.removeFiles(name)
}

// removeFiles removes what the host keeps for an environment: its agent
// secret, its identity directory and its hibernation marker.
func (r *Runtime) removeFiles(name string) error {
	if err := os.Remove(r.secretFile(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("docker: %w", err)
	}
	if err := os.RemoveAll(r.identityDir(name)); err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	return r.removeMarker(name)
}

// identityDir is the host directory mounted at path.Dir(IdentityPath) in a
// read-only root's container.
func (r *Runtime) identityDir(name string) string {
	return filepath.Join(r.cfg.SecretDir, r.cfg.Owner+"."+name+".identity")
}

// secretFile is where an environment's agent secret lives on the host.
func (r *Runtime) secretFile(name string) string {
	return filepath.Join(r.cfg.SecretDir, r.cfg.Owner+"."+name+".secret")
}

// agentCaps are the capabilities the agent keeps: starting its commands as
// user (setuid, setgid) and signalling them (kill). With profile root the
// commands run as the agent's own user and it needs none.
func agentCaps(user string) []string {
	if user == nobody {
		return []string{"SETUID", "SETGID", "KILL"}
	}
	return nil
}

// idErr maps an engine error about one of our containers.
func (r *Runtime) idErr(op, name string, err error) error {
	switch {
	case err == nil:
		return nil
	case cerrdefs.IsNotFound(err):
		// Removed between find and op.
		return fmt.Errorf("%w: %s", ports.ErrEnvNotFound, name)
	}
	return engineErr(op+" "+name, err)
}

// Inspect implements ports.Runtime.
func (r *Runtime) Inspect(ctx context.Context, name string) (ports.Environment, error) {
	id, err := r.find(ctx, name)
	if err != nil {
		return ports.Environment{}, err
	}
	return r.inspectID(ctx, id, name)
}

func (r *Runtime) inspectID(ctx context.Context, id, name string) (ports.Environment, error) {
	c, err := r.cli.ContainerInspect(ctx, id)
	if err != nil {
		return ports.Environment{}, r.idErr("inspect", name, err)
	}
	return r.markHibernated(toEnv(c)), nil
}

// List implements ports.Runtime: every container of this owner, any state.
func (r *Runtime) List(ctx context.Context) ([]ports.Environment, error) {
	if err := r.ready(ctx); err != nil {
		return nil, err
	}
	list, err := r.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: r.ownerFilter()})
	if err != nil {
		return nil, engineErr("list", err)
	}
	envs := make([]ports.Environment, 0, len(list))
	for _, s := range list {
		// The summary lacks limits and exit details; one inspect each is cheap.
		c, err := r.cli.ContainerInspect(ctx, s.ID)
		if cerrdefs.IsNotFound(err) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, engineErr("inspect", err)
		}
		envs = append(envs, r.markHibernated(toEnv(c)))
	}
	return envs, nil
}

// Recover implements ports.Runtime. Containers need no host-side plumbing:
// their agents reconnect through the mounted socket directory on their own.
func (r *Runtime) Recover(ctx context.Context) ([]ports.Environment, error) {
	return r.List(ctx)
}

// StateOf maps an engine container state onto an environment state and a
// detail saying why it is not running.
func StateOf(s *container.State) (ports.EnvState, string) {
	if s == nil {
		return ports.EnvFailed, "no state"
	}
	detail := func() string {
		var parts []string
		if s.ExitCode != 0 || s.Status == container.StateExited {
			parts = append(parts, "exit code "+strconv.Itoa(s.ExitCode))
		}
		if s.OOMKilled {
			parts = append(parts, "killed: out of memory")
		}
		if s.Error != "" {
			parts = append(parts, s.Error)
		}
		return strings.Join(parts, "; ")
	}
	switch {
	case s.Status == container.StateDead || s.Dead:
		return ports.EnvFailed, detail()
	case s.Paused || s.Status == container.StatePaused:
		return ports.EnvPaused, ""
	case s.Running || s.Status == container.StateRestarting:
		return ports.EnvRunning, ""
	case s.Error != "":
		// The engine could not start it (a missing mount, a bad entrypoint).
		return ports.EnvFailed, detail()
	case s.Status == container.StateExited && (s.ExitCode != 0 || s.OOMKilled):
		// Stop's SIGTERM ends the agent with 0; anything else is a crash or
		// a kill from outside.
		return ports.EnvFailed, detail()
	}
	// created, exited, removing
	return ports.EnvStopped, detail()
}

func toEnv(c container.InspectResponse) ports.Environment {
	env := ports.Environment{Runtime: RuntimeName}
	if c.ContainerJSONBase != nil {
		env.RuntimeID = c.ID
		env.State, env.Detail = StateOf(c.State)
		env.CreatedAt, _ = time.Parse(time.RFC3339Nano, c.Created)
		if h := c.HostConfig; h != nil {
			env.Network = ports.NetworkMode(h.NetworkMode)
			if c.Config != nil && c.Config.Labels[LabelNetwork] != "" {
				env.Network = ports.NetworkMode(c.Config.Labels[LabelNetwork])
			}
			env.Resources = ports.Resources{
				CPUs:     float64(h.NanoCPUs) / 1e9,
				MemoryMB: int(h.Memory >> 20),
			}
			if h.PidsLimit != nil {
				env.Resources.PIDs = int(*h.PidsLimit)
			}
		}
	}
	if c.Config != nil {
		env.Image = c.Config.Image
		env.Name = c.Config.Labels[LabelEnv]
		for k, v := range c.Config.Labels {
			if uk, ok := strings.CutPrefix(k, LabelUserPrefix); ok {
				if env.Labels == nil {
					env.Labels = map[string]string{}
				}
				env.Labels[uk] = v
			}
		}
	}
	return env
}

// engineNetwork is the engine's network for a mode: proxy is none (no
// device), its egress going through the agent.
func engineNetwork(mode ports.NetworkMode) container.NetworkMode {
	if mode == ports.NetworkProxy {
		mode = ports.NetworkNone
	}
	return container.NetworkMode(mode)
}
