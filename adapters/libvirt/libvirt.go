// Package libvirt is the "vm" isolation tier: a ports.Runtime that runs each
// environment as a libvirt domain (QEMU/KVM, or QEMU's TCG where KVM is not
// usable), talking to libvirtd over its RPC protocol (go-libvirt, no cgo)
// and defining domains from typed XML (libvirtxml).
//
// A domain is the project's tiny VM image booted directly (a Debian kernel,
// uncompressed so QEMU enters it through PVH, and an initramfs with busybox
// and the static agent; see scripts/build-vm-image.sh) or a disk image (a qcow2 overlay on it, with a
// cloud-init NoCloud seed carrying the agent). It gets the spec's vCPUs and
// memory, ACPI (so a graceful Stop is an ACPI power-button press), its
// serial console logged to a file, a virtio RNG, and no network at all
// unless the spec asks for QEMU user networking.
//
// No network by default, because the agent does not need one: it reaches
// the management server through a virtio-serial channel whose host end is
// a unix socket QEMU listens on. The adapter relays that socket to the
// server's agent-link unix socket (one goroutine pair per running domain;
// see relay). The guest can thus talk to exactly one thing, the agent
// service, which authenticates it by its per-environment secret; there is no
// IP stack to reach the host, other guests or the internet through. "user"
// networking (outbound NAT through QEMU's slirp, nothing inbound) is opt-in.
//
// Configuration reaches the tiny image as a second cpio archive appended to
// a per-domain copy of the image's initramfs (Linux unpacks concatenated
// archives in order): /etc/agentic-sandbox/agent.env with the agent id (the
// environment's name), its fresh secret and MANAGEMENT_SERVER=serial://…,
// plus the server's own agent binary, which replaces the image's (unless it
// is the very same, see fileSums.imageHasAgent). The file is 0600 on the
// host (libvirt hands it to QEMU while the domain runs) and 0600 in the
// guest, unlike a kernel command line that every guest process can read in
// /proc/cmdline.
//
// Ownership: every domain carries <metadata><agentic:env owner=… name=…/>
// (namespace MetadataNS) and a name prefix. List, Recover, Inspect, Stop,
// Start and Destroy see only domains whose owner is Config.Owner; anything
// else on the host, including a domain with a clashing name, is left alone.
// Per-domain files live in Config.StateDir/<name>/ and Destroy removes them
// with the domain.
//
// Hibernate saves a running guest's memory to its folder and ends its
// QEMU; Wake restores it (hibernate.go, docs/vm-restore.md).
package libvirt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	"libvirt.org/go/libvirtxml"

	"github.com/agentic-sandbox/agentic-sandbox/internal/keylock"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

const (
	networkNone = ports.NetworkNone
	networkUser = ports.NetworkUser
	// RuntimeName is Capabilities().Runtime and Environment.Runtime.
	RuntimeName = "libvirt"
	// maxSocketPath is the longest unix socket path (sun_path, with its NUL).
	maxSocketPath = 107
)

// Runtime is the libvirt adapter of ports.Runtime.
type Runtime struct {
	cfg     Config
	domType string
	log     *slog.Logger

	connMu sync.Mutex
	lv     *golibvirt.Libvirt

	locks keylock.Map // by environment name

	relayMu sync.Mutex
	relays  map[string]*relay
	closed  bool

	sums fileSums

	tmplLocks  keylock.Map // by template key
	tmplMu     sync.Mutex
	tmplFailed map[string]time.Time // template key → when making it failed
	tmplActive map[string][]string  // template domains being made → their build folder and save file

	// Templates made in the background (RestoreAll); tmplBuilding is
	// guarded by relayMu, as closed is.
	tmplBuilding bool
	bg           sync.WaitGroup
	bgCtx        context.Context
	bgCancel     context.CancelFunc
}

var _ ports.Runtime = (*Runtime)(nil)

// New makes the adapter; it does not connect yet (Ping does).
func New(cfg Config) (*Runtime, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := qemuFolder(cfg.StateDir); err != nil {
		return nil, fmt.Errorf("libvirt state dir: %w", err)
	}
	abs, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	cfg.StateDir = abs
	r := &Runtime{cfg: cfg, domType: cfg.domainType(), log: cfg.Logger.With("runtime", RuntimeName), relays: map[string]*relay{}, tmplFailed: map[string]time.Time{}, tmplActive: map[string][]string{}}
	r.bgCtx, r.bgCancel = context.WithCancel(context.Background())
	if cfg.systemQEMU() {
		// QEMU runs as another user (libvirt-qemu) there: a folder on the
		// way that others cannot search fails every boot with a bare
		// "Permission denied"; say which one up front.
		for _, p := range []string{cfg.StateDir, cfg.ImageDir, cfg.Kernel, cfg.Initrd} {
			if d := unsearchable(p); d != "" {
				r.log.Warn("QEMU runs as another user and cannot reach this path: a folder on the way is not searchable by others (chmod o+x)",
					"path", p, "folder", d)
			}
		}
	}
	return r, nil
}

// unsearchable is the first folder on the way to path (path included when
// it is a folder) that others may not search, or "".
func unsearchable(path string) string {
	if path == "" {
		return ""
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		abs = filepath.Dir(abs)
	}
	var dirs []string
	for d := abs; ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if st, err := os.Stat(dirs[i]); err == nil && st.Mode().Perm()&0o001 == 0 {
			return dirs[i]
		}
	}
	return ""
}

// DomainType is the domain type the adapter defines ("kvm", "qemu", "test").
func (r *Runtime) DomainType() string { return r.domType }

// DomainName is the libvirt domain name of an environment.
func (r *Runtime) DomainName(name string) string { return r.cfg.NamePrefix + name }

// EnvDir is the folder of an environment's files.
func (r *Runtime) EnvDir(name string) string { return filepath.Join(r.cfg.StateDir, name) }

// ConsolePath is the file the environment's serial console is logged to.
func (r *Runtime) ConsolePath(name string) string {
	return filepath.Join(r.EnvDir(name), "console.log")
}

// Relaying reports whether a relay runs for the environment (and, second,
// whether it carries a live agent connection).
func (r *Runtime) Relaying(name string) (running, connected bool) {
	r.relayMu.Lock()
	rl := r.relays[name]
	r.relayMu.Unlock()
	if rl == nil {
		return false, false
	}
	return true, rl.Connected()
}

// Capabilities implements ports.Runtime.
func (r *Runtime) Capabilities() ports.RuntimeCapabilities {
	return ports.RuntimeCapabilities{
		Runtime:      RuntimeName,
		Isolation:    ports.KindVM,
		Pause:        true,
		NetworkModes: []ports.NetworkMode{networkNone, ports.NetworkProxy, networkUser},
		// disk_gb sizes the overlay of a disk image; pids has no VM-wide
		// equivalent, so it is refused rather than ignored.
		Limits:   []ports.Limit{ports.LimitCPUs, ports.LimitMemoryMB, ports.LimitDiskGB},
		Images:   true,
		Profiles: slices.Sorted(maps.Keys(r.cfg.Profiles)),
		// The guest's memory saved to a file and restored (hibernate.go).
		Hibernate: ports.HibernateMemory,
	}
}

// --- connection ---------------------------------------------------------

// conn returns a live libvirt connection, dialling one if needed.
func (r *Runtime) conn(ctx context.Context) (*golibvirt.Libvirt, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.connMu.Lock()
	defer r.connMu.Unlock()
	if r.lv != nil && r.lv.IsConnected() {
		return r.lv, nil
	}
	r.lv = nil
	var lv *golibvirt.Libvirt
	if r.cfg.local() {
		lv = golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(r.cfg.Socket), dialers.WithLocalTimeout(5*time.Second)))
		if err := lv.ConnectToURI(golibvirt.ConnectURI(r.cfg.URI)); err != nil {
			return nil, fmt.Errorf("%w: libvirt %s: %v", ports.ErrRuntimeUnavailable, r.cfg.URI, err)
		}
	} else {
		u, _ := url.Parse(r.cfg.URI)
		var err error
		if lv, err = golibvirt.ConnectToURI(u); err != nil {
			return nil, fmt.Errorf("%w: libvirt %s: %v", ports.ErrRuntimeUnavailable, r.cfg.URI, err)
		}
	}
	r.lv = lv
	return lv, nil
}

// lverr maps an error of a libvirt call: libvirt's own errors stay (with
// not-found as ErrEnvNotFound), anything else means the connection broke.
func (r *Runtime) lverr(lv *golibvirt.Libvirt, op string, err error) error {
	if err == nil {
		return nil
	}
	var le golibvirt.Error
	if errors.As(err, &le) {
		if le.Code == uint32(golibvirt.ErrNoDomain) {
			return fmt.Errorf("%s: %w", op, ports.ErrEnvNotFound)
		}
		return fmt.Errorf("libvirt %s: %w", op, err)
	}
	r.connMu.Lock()
	if r.lv == lv {
		r.lv = nil
		go func() { _ = lv.Disconnect() }()
	}
	r.connMu.Unlock()
	return fmt.Errorf("%w: libvirt %s: %v", ports.ErrRuntimeUnavailable, op, err)
}

// Ping implements ports.Runtime.
func (r *Runtime) Ping(ctx context.Context) error {
	lv, err := r.conn(ctx)
	if err != nil {
		return err
	}
	_, err = lv.ConnectGetLibVersion()
	return r.lverr(lv, "ping", err)
}

// Close stops the relays and disconnects; domains keep running (a new
// process takes them over with Recover).
func (r *Runtime) Close() error {
	r.relayMu.Lock()
	r.closed = true
	relays := r.relays
	r.relays = map[string]*relay{}
	r.relayMu.Unlock()
	for _, rl := range relays {
		rl.stop()
	}
	r.bgCancel()
	r.bg.Wait()
	r.connMu.Lock()
	defer r.connMu.Unlock()
	if r.lv != nil {
		err := r.lv.Disconnect()
		r.lv = nil
		return err
	}
	return nil
}

func (r *Runtime) lock(name string) func() { return r.locks.Lock(name) }

// qemuFolder makes path (and its parents) searchable by others, whatever
// the umask: QEMU runs as another user (libvirt-qemu) and must reach the
// files inside, which stay 0600.
func qemuFolder(path string) error {
	if err := os.MkdirAll(path, 0o711); err != nil { //nolint:gosec // traverse only, for QEMU
		return err
	}
	return os.Chmod(path, 0o711) //nolint:gosec // traverse only, for QEMU
}

// --- domains ------------------------------------------------------------

// owned is one of this server's domains, as libvirt describes it now.
type owned struct {
	dom  golibvirt.Domain
	def  *libvirtxml.Domain
	meta envMeta
}

// describe reads a domain's definition and our metadata; ok is false for a
// domain that is not this owner's environment.
func (r *Runtime) describe(lv *golibvirt.Libvirt, dom golibvirt.Domain) (owned, bool, error) {
	x, err := lv.DomainGetXMLDesc(dom, 0)
	if err != nil {
		return owned{}, false, r.lverr(lv, "read domain "+dom.Name, err)
	}
	def := &libvirtxml.Domain{}
	if err := def.Unmarshal(x); err != nil {
		return owned{}, false, fmt.Errorf("libvirt: domain %s: %w", dom.Name, err)
	}
	meta, ok := parseMeta(def.Metadata)
	if !ok || meta.Owner != r.cfg.Owner || dom.Name != r.DomainName(meta.Name) {
		return owned{}, false, nil
	}
	return owned{dom: dom, def: def, meta: meta}, true, nil
}

// lookup finds the environment's domain (ErrEnvNotFound if there is none
// or it is not ours).
func (r *Runtime) lookup(ctx context.Context, name string) (*golibvirt.Libvirt, owned, error) {
	if !ports.ValidEnvironmentName(name) {
		return nil, owned{}, fmt.Errorf("environment %q: %w", name, ports.ErrEnvNotFound)
	}
	lv, err := r.conn(ctx)
	if err != nil {
		return nil, owned{}, err
	}
	dom, err := lv.DomainLookupByName(r.DomainName(name))
	if err != nil {
		return lv, owned{}, r.lverr(lv, "environment "+name, err)
	}
	o, ok, err := r.describe(lv, dom)
	if err != nil {
		return lv, owned{}, err
	}
	if !ok {
		return lv, owned{}, fmt.Errorf("environment %s (domain %s is not this server's): %w", name, dom.Name, ports.ErrEnvNotFound)
	}
	return lv, o, nil
}

// state reads a domain's state as an EnvState, with a reason for stopped
// and failed ones.
func (r *Runtime) state(lv *golibvirt.Libvirt, dom golibvirt.Domain) (ports.EnvState, string, error) {
	st, reason, err := lv.DomainGetState(dom, 0)
	if err != nil {
		return "", "", r.lverr(lv, "state of "+dom.Name, err)
	}
	switch golibvirt.DomainState(st) {
	case golibvirt.DomainRunning, golibvirt.DomainBlocked:
		return ports.EnvRunning, "", nil
	case golibvirt.DomainShutdown:
		return ports.EnvRunning, "shutting down", nil
	case golibvirt.DomainPaused, golibvirt.DomainPmsuspended:
		return ports.EnvPaused, "", nil
	case golibvirt.DomainShutoff:
		return ports.EnvStopped, shutoffReason(golibvirt.DomainShutoffReason(reason)), nil
	case golibvirt.DomainCrashed:
		return ports.EnvFailed, "crashed", nil
	}
	return ports.EnvCreating, "", nil
}

func shutoffReason(r golibvirt.DomainShutoffReason) string {
	switch r {
	case golibvirt.DomainShutoffShutdown:
		return "shut down"
	case golibvirt.DomainShutoffDestroyed:
		return "forced off"
	case golibvirt.DomainShutoffCrashed:
		return "crashed"
	case golibvirt.DomainShutoffFailed:
		return "failed to start"
	case golibvirt.DomainShutoffSaved:
		return "saved"
	case golibvirt.DomainShutoffDaemon:
		return "stopped by libvirtd"
	}
	return ""
}

func (r *Runtime) environment(lv *golibvirt.Libvirt, o owned) (ports.Environment, error) {
	st, detail, err := r.state(lv, o.dom)
	if err != nil {
		return ports.Environment{}, err
	}
	env := ports.Environment{
		Name:      o.meta.Name,
		Runtime:   RuntimeName,
		RuntimeID: o.def.UUID,
		State:     st,
		Image:     o.meta.Image,
		Network:   o.meta.Network,
		CreatedAt: o.meta.created(),
		Detail:    detail,
		Labels:    o.meta.labels(),
	}
	if env.Network == "" {
		env.Network = networkNone
	}
	r.hibernated(&env)
	if o.def.VCPU != nil {
		env.Resources.CPUs = float64(o.def.VCPU.Value)
	}
	if o.def.Memory != nil {
		env.Resources.MemoryMB = int(toMiB(o.def.Memory.Value, o.def.Memory.Unit))
	}
	return env, nil
}

func toMiB(v uint, unit string) uint {
	switch strings.ToLower(unit) {
	case "b", "bytes":
		return v >> 20
	case "mib", "m":
		return v
	case "gib", "g":
		return v << 10
	case "mb":
		return v * 1000 * 1000 >> 20
	default: // KiB, libvirt's own unit
		return v >> 10
	}
}

// --- the port -----------------------------------------------------------

// Inspect implements ports.Runtime.
func (r *Runtime) Inspect(ctx context.Context, name string) (ports.Environment, error) {
	lv, o, err := r.lookup(ctx, name)
	if err != nil {
		return ports.Environment{}, err
	}
	return r.environment(lv, o)
}

// List implements ports.Runtime.
func (r *Runtime) List(ctx context.Context) ([]ports.Environment, error) {
	lv, mine, err := r.owned(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ports.Environment, 0, len(mine))
	for _, o := range mine {
		env, err := r.environment(lv, o)
		if errors.Is(err, ports.ErrEnvNotFound) {
			continue // undefined meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, env)
	}
	return out, nil
}

func (r *Runtime) owned(ctx context.Context) (*golibvirt.Libvirt, []owned, error) {
	lv, err := r.conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	doms, _, err := lv.ConnectListAllDomains(1, 0)
	if err != nil {
		return nil, nil, r.lverr(lv, "list domains", err)
	}
	var mine []owned
	for _, d := range doms {
		if !strings.HasPrefix(d.Name, r.cfg.NamePrefix) {
			continue
		}
		o, ok, err := r.describe(lv, d)
		if errors.Is(err, ports.ErrEnvNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if ok {
			mine = append(mine, o)
		}
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i].meta.Name < mine[j].meta.Name })
	return lv, mine, nil
}

// Recover implements ports.Runtime: it finds this owner's domains, starts
// the relays of the running ones, and removes state folders that belong to
// no domain (left by a crash in the middle of a Provision or Destroy).
func (r *Runtime) Recover(ctx context.Context) ([]ports.Environment, error) {
	lv, mine, err := r.owned(ctx)
	if err != nil {
		return nil, err
	}
	r.cleanTemplateBuilds(lv)
	known := map[string]bool{}
	out := make([]ports.Environment, 0, len(mine))
	for _, o := range mine {
		known[o.meta.Name] = true
		env, err := r.environment(lv, o)
		if errors.Is(err, ports.ErrEnvNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		// A hibernated environment gets its relay when it wakes.
		env = r.recoverSave(env)
		if env.State == ports.EnvRunning || env.State == ports.EnvPaused {
			r.startRelay(o.meta.Name, o.meta.Socket, nil)
		}
		out = append(out, env)
	}
	entries, _ := os.ReadDir(r.cfg.StateDir)
	for _, e := range entries {
		if !e.IsDir() || known[e.Name()] || !ports.ValidEnvironmentName(e.Name()) {
			continue
		}
		unlock := r.lock(e.Name())
		if _, err := lv.DomainLookupByName(r.DomainName(e.Name())); golibvirt.IsNotFound(err) {
			r.log.Info("removing the files of a vanished environment", "env", e.Name())
			_ = os.RemoveAll(filepath.Join(r.cfg.StateDir, e.Name()))
		}
		unlock()
	}
	return out, nil
}

// Provision implements ports.Runtime.
func (r *Runtime) Provision(ctx context.Context, spec ports.EnvironmentSpec) (ports.Environment, error) {
	plan, boot, err := r.plan(spec)
	if err != nil {
		return ports.Environment{}, err
	}
	progress := func(step string) {
		if spec.Progress != nil {
			spec.Progress(step)
		}
	}
	name := spec.Name
	unlock := r.lock(name)
	defer unlock()

	lv, err := r.conn(ctx)
	if err != nil {
		return ports.Environment{}, err
	}
	if _, err := lv.DomainLookupByName(plan.DomainName); err == nil {
		return ports.Environment{}, fmt.Errorf("environment %s (domain %s): %w", name, plan.DomainName, ports.ErrEnvExists)
	} else if !golibvirt.IsNotFound(err) {
		return ports.Environment{}, r.lverr(lv, "look up "+plan.DomainName, err)
	}

	dir := r.EnvDir(name)
	// A folder without a domain is what a crash left behind.
	_ = os.RemoveAll(dir)
	failed := true
	defer func() {
		if failed {
			_ = os.RemoveAll(dir)
		}
	}()
	progress("prepare")
	if err := qemuFolder(dir); err != nil {
		return ports.Environment{}, fmt.Errorf("libvirt: %w", err)
	}
	if err := boot(ctx, dir); err != nil {
		return ports.Environment{}, err
	}

	var dom golibvirt.Domain
	defer func() {
		if failed && dom.Name != "" {
			_ = lv.DomainDestroy(dom)
			_ = lv.DomainUndefineFlags(dom, golibvirt.DomainUndefineManagedSave|golibvirt.DomainUndefineSnapshotsMetadata)
			r.removeQemuLog(plan.DomainName)
		}
	}()
	var identity func() ([]byte, error)
	if r.restores(spec, plan) {
		if d, ok := r.tryRestore(ctx, lv, plan, spec.Labels[ports.LabelPool] != "", progress); ok {
			dom, identity = d, linkIdentity(name, spec.Agent.Secret)
		}
	}
	if identity == nil {
		progress("define")
		x, err := domainXML(plan)
		if err != nil {
			return ports.Environment{}, fmt.Errorf("%w: %v", ports.ErrInvalidSpec, err)
		}
		if err := ctx.Err(); err != nil {
			return ports.Environment{}, err
		}
		if dom, err = lv.DomainDefineXMLFlags(x, golibvirt.DomainDefineValidate); err != nil {
			return ports.Environment{}, r.lverr(lv, "define "+plan.DomainName, err)
		}
		progress("boot")
		if err := ctx.Err(); err != nil {
			return ports.Environment{}, err
		}
		if err := lv.DomainCreate(dom); err != nil {
			return ports.Environment{}, r.lverr(lv, "start "+plan.DomainName, err)
		}
	}
	// On the test driver nothing serves the channel unless a test plays
	// the guest; the relay then just keeps retrying, harmlessly.
	progress("relay")
	r.startRelay(name, spec.Agent.Socket, identity)
	o, ok, err := r.describe(lv, dom)
	if err != nil || !ok {
		r.stopRelay(name)
		if err == nil {
			err = errors.New("libvirt: the defined domain lost its metadata")
		}
		return ports.Environment{}, err
	}
	env, err := r.environment(lv, o)
	if err != nil {
		r.stopRelay(name)
		return ports.Environment{}, err
	}
	failed = false
	progress("running")
	return env, nil
}

// plan validates a spec and works out the domain; boot prepares the
// per-domain files in dir.
func (r *Runtime) plan(spec ports.EnvironmentSpec) (domainPlan, func(ctx context.Context, dir string) error, error) {
	bad := func(format string, a ...any) (domainPlan, func(context.Context, string) error, error) {
		return domainPlan{}, nil, fmt.Errorf("%w: %s", ports.ErrInvalidSpec, fmt.Sprintf(format, a...))
	}
	name := spec.Name
	if err := r.Capabilities().CheckSpec(spec); err != nil {
		return domainPlan{}, nil, err
	}
	if spec.Agent.Socket == "" {
		return bad("no agent socket: a VM reaches the server only through it")
	}
	if len(spec.Agent.Socket) > maxSocketPath {
		return bad("agent socket path is too long for a unix socket")
	}
	network := spec.Network
	if network == "" {
		network = networkNone
	}
	res := spec.Resources
	cpus, mem := r.cfg.CPUs, r.cfg.MemoryMB
	if p, ok := r.cfg.Profiles[spec.Profile]; ok {
		if p.CPUs > 0 {
			cpus = p.CPUs
		}
		if p.MemoryMB > 0 {
			mem = p.MemoryMB
		}
	}
	if res.CPUs > 0 {
		cpus = int(math.Ceil(res.CPUs))
	}
	if res.MemoryMB > 0 {
		mem = res.MemoryMB
	}
	if cpus > 256 {
		return bad("%d vCPUs is more than 256", cpus)
	}
	if mem < 64 {
		return bad("%d MiB of memory is less than 64", mem)
	}

	dir := r.EnvDir(name)
	channel := filepath.Join(dir, "agent.sock")
	if len(channel) > maxSocketPath {
		return bad("state folder path is too long for the channel socket %s", channel)
	}
	plan := domainPlan{
		DomainName: r.DomainName(name),
		Type:       r.domType,
		VCPUs:      uint(cpus),
		MemoryMiB:  uint(mem),
		Network:    network,
		Console:    filepath.Join(dir, "console.log"),
		Channel:    channel,
		Meta: envMeta{
			Owner: r.cfg.Owner, Name: name, Created: time.Now().UTC().Format(time.RFC3339Nano),
			Network: network, Image: spec.Image, Socket: spec.Agent.Socket, Dir: dir,
			Labels: metaLabels(spec.Labels),
		},
	}
	env := map[string]string{
		"AGENT_ID":          name,
		"AGENT_SECRET":      spec.Agent.Secret,
		"AGENT_RUNTIME":     string(ports.KindVM),
		"MANAGEMENT_SERVER": "serial:///dev/virtio-ports/" + AgentChannel,
		// The guest's commands run as nobody: agent.env (root's, 0600)
		// and the agent's memory are out of their reach.
		"AGENT_RUN_AS": "65534:65534",
		// Their home and working directory (where relative file paths
		// start), as in containers: nobody's passwd home is /nonexistent.
		"AGENT_RUN_AS_HOME": "/tmp",
		// A rename (a pool member taken) lasts until the guest reboots: its
		// root is in memory, and a reboot reads this seed again.
		"AGENT_IDENTITY_FILE": "/run/agentic-agent/identity",
	}
	if network == ports.NetworkProxy {
		env["AGENT_EGRESS_PROXY"] = ports.EgressProxyAddr
	}

	kernel, initrd := r.cfg.Kernel, r.cfg.Initrd
	if r.cfg.ImageDir != "" {
		k, i := imageFiles(r.cfg.ImageDir)
		if kernel == "" {
			kernel = k
		}
		if initrd == "" {
			initrd = i
		}
	}
	if spec.Image != "" {
		if err := r.imageAllowed(spec.Image); err != nil {
			return domainPlan{}, nil, err
		}
		st, err := os.Stat(spec.Image)
		if err != nil {
			return bad("image %q: %v", spec.Image, err)
		}
		if st.IsDir() {
			kernel, initrd = imageFiles(spec.Image)
		} else {
			image, err := filepath.Abs(spec.Image)
			if err != nil {
				return bad("image %q: %v", spec.Image, err)
			}
			plan.Disk = filepath.Join(dir, "disk.qcow2")
			plan.Seed = filepath.Join(dir, "seed.iso")
			return plan, func(ctx context.Context, dir string) error {
				return r.prepareDisk(ctx, image, plan.Disk, plan.Seed, name, env, spec.Agent.Binary, spec.Resources.DiskGB)
			}, nil
		}
	}
	if res.DiskGB > 0 {
		// The default image boots from an initramfs: there is no disk to size.
		return bad("resources: disk_gb needs a disk image (the default image has no disk)")
	}
	if kernel == "" || initrd == "" {
		return bad("no image: the spec names none and the runtime has no default kernel and initrd (build them with `make vm-image`)")
	}
	for _, f := range []string{kernel, initrd} {
		if _, err := os.Stat(f); err != nil {
			return bad("VM image file missing (build the image with `make vm-image`): %v", err)
		}
	}
	if spec.Agent.Binary != "" {
		if _, err := os.Stat(spec.Agent.Binary); err != nil {
			return bad("agent binary: %v", err)
		}
	}
	kernel, _ = filepath.Abs(kernel)
	plan.Kernel = kernel
	plan.Initrd = filepath.Join(dir, "initrd.img")
	plan.Cmdline = r.cfg.Cmdline
	agent := spec.Agent.Binary
	if agent != "" && r.sums.imageHasAgent(initrd, agent) {
		agent = ""
	}
	plan.agentEnv, plan.baseInitrd, plan.addedAgent = env, initrd, agent
	return plan, func(_ context.Context, dir string) error {
		if err := writeInitrd(plan.Initrd, initrd, env, agent); err != nil {
			return fmt.Errorf("libvirt: initrd: %w", err)
		}
		return nil
	}, nil
}

// imageAllowed refuses an image outside DiskImageDir (and the tiny image's
// dir), symbolic links resolved: otherwise a caller could boot /etc/shadow.
func (r *Runtime) imageAllowed(image string) error {
	if r.cfg.DiskImageDir == "" {
		return nil
	}
	real, err := filepath.EvalSymlinks(image)
	if err != nil {
		return fmt.Errorf("%w: image %q: %v", ports.ErrInvalidSpec, image, err)
	}
	for _, dir := range []string{r.cfg.DiskImageDir, r.cfg.ImageDir} {
		if dir == "" {
			continue
		}
		root, err := filepath.EvalSymlinks(dir)
		if err != nil {
			continue
		}
		if rel, err := filepath.Rel(root, real); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return nil
		}
	}
	return fmt.Errorf("%w: image %q: images come only from %s", ports.ErrInvalidSpec, image, r.cfg.DiskImageDir)
}

// Start implements ports.Runtime: it boots a stopped environment (resumes a
// paused one, wakes a hibernated one: a restore of its saved memory, as
// Wake, never a boot that would throw the saved state away; boots afresh
// one whose saved state was lost) and starts its relay.
func (r *Runtime) Start(ctx context.Context, name string) error {
	unlock := r.lock(name)
	defer unlock()
	lv, o, err := r.lookup(ctx, name)
	if err != nil {
		return err
	}
	st, _, err := r.state(lv, o.dom)
	if err != nil {
		return err
	}
	switch st {
	case ports.EnvRunning:
	case ports.EnvPaused:
		if err := lv.DomainResume(o.dom); err != nil {
			return r.lverr(lv, "resume "+o.dom.Name, err)
		}
	default:
		if _, ok := r.saved(name); ok {
			return r.wake(ctx, lv, o)
		}
		// A lost saved state: boots afresh.
		r.forgetLost(name)
		if err := qemuFolder(r.EnvDir(name)); err != nil {
			return fmt.Errorf("libvirt: %w", err)
		}
		if err := lv.DomainCreate(o.dom); err != nil {
			return r.lverr(lv, "start "+o.dom.Name, err)
		}
	}
	r.startRelay(name, o.meta.Socket, nil)
	return nil
}

// Stop implements ports.Runtime: an ACPI power-button press, then, after
// StopTimeout (or shortly before ctx's deadline), a forced power-off. The
// domain stays defined. A hibernated environment is left hibernated.
func (r *Runtime) Stop(ctx context.Context, name string) error {
	unlock := r.lock(name)
	defer unlock()
	lv, o, err := r.lookup(ctx, name)
	if err != nil {
		return err
	}
	defer r.stopRelay(name)
	st, _, err := r.state(lv, o.dom)
	if err != nil {
		return err
	}
	switch st {
	case ports.EnvStopped:
		return nil
	case ports.EnvRunning:
		if err := lv.DomainShutdown(o.dom); err != nil && !isNotRunning(err) {
			return r.lverr(lv, "shut down "+o.dom.Name, err)
		}
		grace := r.cfg.StopTimeout
		if dl, ok := ctx.Deadline(); ok {
			grace = min(grace, time.Until(dl)-2*time.Second)
		}
		deadline := time.Now().Add(grace)
		for time.Now().Before(deadline) {
			st, _, err := r.state(lv, o.dom)
			if err != nil {
				return err
			}
			if st == ports.EnvStopped {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		r.log.Warn("graceful shutdown timed out; forcing the domain off", "env", name, "after", grace)
	}
	if err := lv.DomainDestroy(o.dom); err != nil && !isNotRunning(err) {
		return r.lverr(lv, "power off "+o.dom.Name, err)
	}
	return nil
}

// Pause suspends a running environment's vCPUs (its memory stays).
func (r *Runtime) Pause(ctx context.Context, name string) error {
	return r.domainCall(ctx, name, "suspend", (*golibvirt.Libvirt).DomainSuspend)
}

// Resume continues a paused environment.
func (r *Runtime) Resume(ctx context.Context, name string) error {
	return r.domainCall(ctx, name, "resume", (*golibvirt.Libvirt).DomainResume)
}

// domainCall makes the one libvirt call (op names it in errors) on the
// environment's domain, under the environment's lock.
func (r *Runtime) domainCall(ctx context.Context, name, op string, call func(*golibvirt.Libvirt, golibvirt.Domain) error) error {
	unlock := r.lock(name)
	defer unlock()
	lv, o, err := r.lookup(ctx, name)
	if err != nil {
		return err
	}
	return r.lverr(lv, op+" "+o.dom.Name, call(lv, o.dom))
}

// Destroy implements ports.Runtime: power off, undefine, remove the files.
func (r *Runtime) Destroy(ctx context.Context, name string) error {
	unlock := r.lock(name)
	defer unlock()
	lv, o, err := r.lookup(ctx, name)
	if err != nil {
		return err
	}
	r.stopRelay(name)
	if err := lv.DomainDestroy(o.dom); err != nil && !isNotRunning(err) {
		return r.lverr(lv, "power off "+o.dom.Name, err)
	}
	if err := lv.DomainUndefineFlags(o.dom, golibvirt.DomainUndefineManagedSave|golibvirt.DomainUndefineSnapshotsMetadata); err != nil && !golibvirt.IsNotFound(err) {
		return r.lverr(lv, "undefine "+o.dom.Name, err)
	}
	dir := r.EnvDir(name)
	if o.meta.Dir != "" && o.meta.Dir != dir {
		// Made under another StateDir by an earlier configuration.
		if filepath.Base(o.meta.Dir) == name {
			_ = os.RemoveAll(o.meta.Dir)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("libvirt: remove %s: %w", dir, err)
	}
	r.removeQemuLog(o.dom.Name)
	return nil
}

// QemuLogPath is libvirt's own log of the environment's QEMU process
// ("" when Config.QemuLogDir is unset).
func (r *Runtime) QemuLogPath(name string) string {
	if r.cfg.QemuLogDir == "" {
		return ""
	}
	return filepath.Join(r.cfg.QemuLogDir, r.DomainName(name)+".log")
}

// removeQemuLog removes libvirt's log of a domain that is gone (libvirt
// keeps it after undefine), and its rotations.
func (r *Runtime) removeQemuLog(domain string) {
	if r.cfg.QemuLogDir == "" {
		return
	}
	base := filepath.Join(r.cfg.QemuLogDir, domain+".log")
	rotated, _ := filepath.Glob(base + ".[0-9]*")
	for _, f := range append(rotated, base) {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			r.log.Warn("cannot remove libvirt's log of a removed domain", "file", f, "err", err)
		}
	}
}

// isNotRunning is libvirt's "domain is not running" (operation invalid).
func isNotRunning(err error) bool {
	var le golibvirt.Error
	return errors.As(err, &le) && le.Code == uint32(golibvirt.ErrOperationInvalid)
}

// --- relays -------------------------------------------------------------

// startRelay starts the environment's relay; identity, when set, answers
// its guest's identity hello (a clone of a template).
func (r *Runtime) startRelay(name, socket string, identity func() ([]byte, error)) {
	r.startRelayWith(name, socket, identity, false)
}

// startRelayWith is startRelay; eager makes the relay dial a channel that
// is not there yet every few milliseconds (relay.eager).
func (r *Runtime) startRelayWith(name, socket string, identity func() ([]byte, error), eager bool) {
	if r.cfg.AgentSocket != "" {
		socket = r.cfg.AgentSocket
	}
	if socket == "" {
		r.log.Warn("no agent socket recorded; the agent cannot reach the server", "env", name)
		return
	}
	r.relayMu.Lock()
	defer r.relayMu.Unlock()
	if r.closed || r.relays[name] != nil {
		return
	}
	rl := newRelay(name, filepath.Join(r.EnvDir(name), "agent.sock"), socket, r.log)
	if identity != nil {
		rl.offerIdentity(identity)
	}
	rl.eager = eager
	r.relays[name] = rl
	rl.start()
}

func (r *Runtime) stopRelay(name string) {
	r.relayMu.Lock()
	rl := r.relays[name]
	delete(r.relays, name)
	r.relayMu.Unlock()
	if rl != nil {
		rl.stop()
	}
}
