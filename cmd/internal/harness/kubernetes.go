package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/ociimage"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
)

// The Kubernetes test cluster (issue 28): one real single-node cluster built
// from source (scripts/kubernetes-test-env.sh, run by `make test-env`, builds
// the binaries and images), started by test/k8s/cluster-up.sh and stopped by
// test/k8s/cluster-down.sh. Only one can run on a machine at a time (the
// kubelet's device-plugin socket path is fixed, and the ports, bridge and
// cgroup root are fixed names): the test processes of a run share it
// (startSharedKubernetes: the first starts it, the last stops it), and a
// test that needs a cluster of its own (StartKubernetes) waits until nobody
// uses the shared one. It is the kubernetes runtime's test engine
// (startKubernetesEngine): part of `make test` like the private dockerd.

const (
	// KubernetesWorkloadImage is the locally built workload image every
	// cluster has imported (busybox and a probe; imagePullPolicy Never).
	KubernetesWorkloadImage = "localhost/agentic-test/workload:1"
	// KubernetesGateway is the pods' bridge gateway: where a pod reaches the
	// host (there is no kube-proxy or cluster DNS).
	KubernetesGateway = "10.246.0.1"
	// KubernetesGVisorClass is the RuntimeClass (handler runsc) of a
	// cluster whose GVisor is set: the gvisor tier's, as
	// AGENTIC_K8S_RUNTIME_CLASSES=gvisor=gvisor names it.
	KubernetesGVisorClass = "gvisor"

	kubeBridge     = "agk8s0"
	kubeCgroupRoot = "agentic-k8s"
	kubeLockFile   = "/tmp/agentic-k8s.lock"
	// kubeUsersFile is held shared by every test process using the shared
	// cluster; whoever takes it exclusively is the last (or only) one.
	kubeUsersFile = "/tmp/agentic-k8s.users"
	// kubeSharedMarker holds the token of the running shared cluster (its
	// watchdog's), absent when none runs.
	kubeSharedMarker = "/tmp/agentic-k8s.shared"
)

// kubeSysctls are the host settings the kubelet rewrites while it runs;
// cluster-down.sh restores them.
var kubeSysctls = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

// KubernetesCluster is a running test cluster.
type KubernetesCluster struct {
	// Kubeconfig is the admin kubeconfig (KUBECONFIG for a client).
	Kubeconfig string
	// KubectlPath is the kubectl built with the cluster.
	KubectlPath string
	// State is the directory the cluster lives in.
	State string
	// UpTook is how long cluster-up.sh took (processes started → node
	// Ready and pods creatable); UpLog is what it printed.
	UpTook time.Duration
	UpLog  string
	// GVisor says the cluster runs pods under gVisor: cluster-up.sh found
	// runsc and its shim (test/k8s/build-gvisor.sh builds them), registered
	// the runtime handler runsc and made RuntimeClass KubernetesGVisorClass.
	GVisor bool

	root, buildDir string
	lock           *os.File
	// users is kubeUsersFile, held shared (a shared cluster's user) or
	// exclusively (a cluster of its own).
	users    *os.File
	shared   bool
	watchdog *exec.Cmd
	sysctls  map[string]string
	stopOnce sync.Once
	stopErr  error

	// ProjectImages's, once per cluster.
	imagesOnce                sync.Once
	agentImage, workloadImage string
	imagesErr                 error
}

// kubeHeld is set while this process runs a cluster: a second start in the
// same process would wait on its own lock forever.
var kubeHeld sync.Mutex

// KubernetesBuildDir is where scripts/kubernetes-test-env.sh put the
// binaries and images (AGENTIC_K8S_DIR, default <repo>/build/k8s).
func KubernetesBuildDir() (string, error) {
	if d := os.Getenv("AGENTIC_K8S_DIR"); d != "" {
		return d, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "build", "k8s"), nil
}

// canRunKubernetes says what the machine lacks for the cluster.
func canRunKubernetes(buildDir string) error {
	how := testEnvHow("kubernetes")
	if os.Geteuid() != 0 {
		return &Missing{What: "root (the Kubernetes test cluster)", How: "run the tests as root"}
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"} {
		if _, err := os.Stat(filepath.Join(buildDir, "bin", b)); err != nil {
			return &Missing{What: "the Kubernetes binaries (" + b + ")", How: how}
		}
	}
	for _, b := range []string{"containerd", "runc", "ctr"} {
		if _, err := exec.LookPath(b); err != nil {
			return &Missing{What: b, How: how}
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		return &Missing{What: "the CNI plugins", How: how}
	}
	return nil
}

// StartKubernetes starts a cluster of its own for the caller, who must Stop
// it. It waits (up to wait) for another test run's cluster to be stopped,
// first cleans up after a run that died without stopping its cluster, and
// leaves a watchdog that stops the cluster should this process die first.
// Tests use the run's shared cluster (Kubernetes) instead; only a test that
// must stop the cluster itself starts its own, and it cannot while the
// shared one runs in the same process (an error says so).
func StartKubernetes(wait time.Duration) (*KubernetesCluster, error) {
	c, err := newKubernetesCluster()
	if err != nil {
		return nil, err
	}
	if !kubeHeld.TryLock() {
		return nil, errors.New("this process already runs the Kubernetes test cluster (use the shared one: Kubernetes)")
	}
	if c.lock, err = lockWithin(kubeLockFile, wait); err != nil {
		kubeHeld.Unlock()
		return nil, err
	}
	// No other test process may be using a shared cluster: this start
	// stops it.
	if c.users, err = flockWithin(kubeUsersFile, wait, syscall.LOCK_EX); err != nil {
		c.release()
		return nil, err
	}
	_ = os.Remove(kubeSharedMarker) // its watchdog leaves it to us
	// Whatever a dead run left behind (we hold the lock: nobody else's).
	if out, err := c.script("cluster-down.sh"); err != nil {
		c.release()
		return nil, fmt.Errorf("cleaning up before the start: %v\n%s", err, out)
	}
	c.sysctls = readSysctls()
	c.startWatchdog()
	start := time.Now()
	out, err := c.script("cluster-up.sh")
	c.UpTook, c.UpLog = time.Since(start), string(out)
	if err != nil {
		logs := c.tailLogs()
		_ = c.Stop()
		return nil, fmt.Errorf("test/k8s/cluster-up.sh: %v\n%s\n%s", err, out, logs)
	}
	if _, err := os.Stat(filepath.Join(c.State, "run", "runsc.toml")); err == nil {
		c.GVisor = true
	}
	return c, nil
}

// newKubernetesCluster is the machine's cluster, not started yet; a
// *Missing error says what the machine lacks to run it.
func newKubernetesCluster() (*KubernetesCluster, error) {
	buildDir, err := KubernetesBuildDir()
	if err != nil {
		return nil, err
	}
	if err := canRunKubernetes(buildDir); err != nil {
		return nil, err
	}
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	c := &KubernetesCluster{root: root, buildDir: buildDir, State: "/tmp/agentic-k8s"}
	c.Kubeconfig = filepath.Join(c.State, "run", "admin.kubeconfig")
	c.KubectlPath = filepath.Join(buildDir, "bin", "kubectl")
	return c, nil
}

// lockWithin takes the machine-wide lock, waiting up to wait for it.
func lockWithin(path string, wait time.Duration) (*os.File, error) {
	return flockWithin(path, wait, syscall.LOCK_EX)
}

// flockWithin takes path's lock (how: LOCK_EX or LOCK_SH), waiting up to wait.
func flockWithin(path string, wait time.Duration, how int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another test run's Kubernetes cluster holds %s: %v", path, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// startWatchdog runs a small shell, holding the lock with us, that runs
// cluster-down.sh once this process is gone: a test binary killed by its
// timeout still leaves no cluster behind (and no other run starts one
// before it is down).
func (c *KubernetesCluster) startWatchdog() {
	w := exec.Command("/bin/sh", "-c", `while kill -0 "$1" 2>/dev/null; do sleep 1 3>&-; done; exec "$2" >/dev/null 2>&1`,
		"agentic-k8s-watchdog", strconv.Itoa(os.Getpid()), filepath.Join(c.root, "test", "k8s", "cluster-down.sh"))
	w.Env = c.env()
	w.ExtraFiles = []*os.File{c.lock}
	w.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if w.Start() == nil {
		c.watchdog = w
		go func() { _ = w.Wait() }()
	}
}

func (c *KubernetesCluster) env() []string {
	return append(os.Environ(), "AGENTIC_K8S_STATE="+c.State, "AGENTIC_K8S_DIR="+c.buildDir)
}

func (c *KubernetesCluster) script(name string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(c.root, "test", "k8s", name))
	cmd.Env = c.env()
	return cmd.CombinedOutput()
}

func (c *KubernetesCluster) tailLogs() string {
	var b strings.Builder
	logs, _ := filepath.Glob(filepath.Join(c.State, "run", "log", "*.log"))
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		if len(data) > 2000 {
			data = data[len(data)-2000:]
		}
		fmt.Fprintf(&b, "--- %s (tail)\n%s\n", filepath.Base(l), data)
	}
	return b.String()
}

// Stop stops the cluster, undoes its host changes and releases the lock; its
// error names anything left behind (KubernetesLeftovers).
func (c *KubernetesCluster) Stop() error {
	if c.shared {
		return c.leaveShared()
	}
	c.stopOnce.Do(func() {
		if c.watchdog != nil && c.watchdog.Process != nil {
			_ = c.watchdog.Process.Kill()
		}
		out, err := c.script("cluster-down.sh")
		if err != nil {
			c.stopErr = fmt.Errorf("test/k8s/cluster-down.sh: %v\n%s", err, out)
		}
		if left := c.Leftovers(); len(left) > 0 {
			c.stopErr = errors.Join(c.stopErr, fmt.Errorf("left behind: %s\n%s", strings.Join(left, "; "), out))
		}
		if c.stopErr == nil {
			_ = os.RemoveAll(c.State)
		}
		c.release()
	})
	return c.stopErr
}

func (c *KubernetesCluster) release() {
	if c.users != nil {
		c.users.Close()
		c.users = nil
	}
	if c.lock != nil {
		c.lock.Close()
		c.lock = nil
	}
	if !c.shared {
		kubeHeld.Unlock()
	}
}

// startSharedKubernetes joins the machine's shared cluster, starting it
// when none runs. Every test process of a run (go test runs packages in
// processes of their own) uses the one cluster, each test in a namespace
// of its own: one start per run, not per package, and no package waits
// for another's to finish. The last process to leave stops it and checks
// nothing is left (leaveShared); a watchdog stops it should every user die
// first.
func startSharedKubernetes(wait time.Duration) (*KubernetesCluster, error) {
	c, err := newKubernetesCluster()
	if err != nil {
		return nil, err
	}
	c.shared = true
	ops, err := lockWithin(kubeLockFile, wait)
	if err != nil {
		return nil, err
	}
	defer ops.Close()
	// Exclusive holders of the users file hold the lock too: not now.
	if c.users, err = flockWithin(kubeUsersFile, 0, syscall.LOCK_SH); err != nil {
		return nil, err
	}
	if token, _ := os.ReadFile(kubeSharedMarker); len(token) > 0 && c.healthy() {
		c.sysctls = savedSysctls(c.State)
		c.GVisor = fileExists(filepath.Join(c.State, "run", "runsc.toml"))
		return c, nil
	}
	_ = os.Remove(kubeSharedMarker)
	if out, err := c.script("cluster-down.sh"); err != nil {
		c.users.Close()
		return nil, fmt.Errorf("cleaning up before the start: %v\n%s", err, out)
	}
	c.sysctls = readSysctls()
	start := time.Now()
	out, err := c.script("cluster-up.sh")
	c.UpTook, c.UpLog = time.Since(start), string(out)
	if err != nil {
		logs := c.tailLogs()
		_, _ = c.script("cluster-down.sh")
		c.users.Close()
		return nil, fmt.Errorf("test/k8s/cluster-up.sh: %v\n%s\n%s", err, out, logs)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	token := hex.EncodeToString(rnd[:])
	if err := os.WriteFile(kubeSharedMarker, []byte(token), 0o600); err != nil {
		_, _ = c.script("cluster-down.sh")
		c.users.Close()
		return nil, err
	}
	c.startSharedWatchdog(token)
	c.GVisor = fileExists(filepath.Join(c.State, "run", "runsc.toml"))
	return c, nil
}

// startSharedWatchdog leaves a shell that, every second, under the lock,
// stops the shared cluster once nobody holds the users file, and ends when
// the cluster it watches is gone (stopped by its last user).
func (c *KubernetesCluster) startSharedWatchdog(token string) {
	w := exec.Command("/bin/sh", "-c", `marker=$1 token=$2 ops=$3 users=$4 down=$5
while sleep 1; do
  exec 8>>"$ops"; flock -x 8
  [ "$(cat "$marker" 2>/dev/null)" = "$token" ] || exit 0
  exec 9>>"$users"
  if flock -x -n 9; then rm -f "$marker"; "$down" >/dev/null 2>&1; exit 0; fi
  exec 9>&- 8>&-
done`, "agentic-k8s-shared-watchdog", kubeSharedMarker, token, kubeLockFile, kubeUsersFile,
		filepath.Join(c.root, "test", "k8s", "cluster-down.sh"))
	w.Env = c.env()
	w.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if w.Start() == nil {
		go func() { _ = w.Wait() }()
	}
}

// leaveShared ends this process's use of the shared cluster; the last user
// stops it, and its error names anything left behind.
func (c *KubernetesCluster) leaveShared() error {
	c.stopOnce.Do(func() {
		if c.users != nil {
			c.users.Close()
			c.users = nil
		}
		// Briefly: whoever holds the lock longer (a start, a cluster of
		// its own) manages the cluster itself.
		ops, err := lockWithin(kubeLockFile, 10*time.Second)
		if err != nil {
			return
		}
		defer ops.Close()
		last, err := flockWithin(kubeUsersFile, 0, syscall.LOCK_EX)
		if err != nil {
			return // others still use it
		}
		defer last.Close()
		if token, _ := os.ReadFile(kubeSharedMarker); len(token) == 0 {
			return // already stopped
		}
		_ = os.Remove(kubeSharedMarker)
		out, err := c.script("cluster-down.sh")
		if err != nil {
			c.stopErr = fmt.Errorf("test/k8s/cluster-down.sh: %v\n%s", err, out)
		}
		if left := c.Leftovers(); len(left) > 0 {
			c.stopErr = errors.Join(c.stopErr, fmt.Errorf("left behind: %s\n%s", strings.Join(left, "; "), out))
		}
		if c.stopErr == nil {
			_ = os.RemoveAll(c.State)
		}
	})
	return c.stopErr
}

// healthy reports whether the cluster's API server answers ready.
func (c *KubernetesCluster) healthy() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := c.Kubectl(ctx, "get", "--raw", "/readyz")
	return err == nil
}

// savedSysctls are the values cluster-up.sh saved before the kubelet
// changed them (what cluster-down.sh restores).
func savedSysctls(state string) map[string]string {
	m := map[string]string{}
	data, _ := os.ReadFile(filepath.Join(state, "sysctl.saved"))
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), " "); ok {
			m[k] = v
		}
	}
	return m
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Leftovers lists what of the cluster is still on the machine: processes
// whose command line names its state or socket, mounts under its state, its
// bridge, its cgroups, the kubelet's sysctls not restored.
func (c *KubernetesCluster) Leftovers() []string {
	var left []string
	run := filepath.Join(c.State, "run") + "/"
	sock := filepath.Join(c.State, "containerd.sock")
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || len(data) == 0 {
			continue
		}
		line := string(bytes.ReplaceAll(data, []byte{0}, []byte{' '}))
		if strings.Contains(line, run) || strings.Contains(line, sock) {
			left = append(left, "process "+filepath.Base(filepath.Dir(p))+": "+truncate(line, 80))
		}
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(mi), "\n") {
			if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], c.State+"/") {
				left = append(left, "mount "+f[4])
			}
		}
	}
	if _, err := os.Stat("/sys/class/net/" + kubeBridge); err == nil {
		left = append(left, "bridge "+kubeBridge)
	}
	cgs, _ := filepath.Glob("/sys/fs/cgroup/*/" + kubeCgroupRoot)
	if d := "/sys/fs/cgroup/" + kubeCgroupRoot; dirExists(d) {
		cgs = append(cgs, d)
	}
	for _, d := range cgs {
		left = append(left, "cgroup "+d)
	}
	now := readSysctls()
	for k, v := range c.sysctls {
		if now[k] != v {
			left = append(left, fmt.Sprintf("sysctl %s=%s (was %s)", k, now[k], v))
		}
	}
	return left
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func readSysctls() map[string]string {
	m := map[string]string{}
	for _, s := range kubeSysctls {
		if v, err := os.ReadFile("/proc/sys/" + s); err == nil {
			m[s] = strings.TrimSpace(string(v))
		}
	}
	return m
}

// Kubectl runs the cluster's kubectl as its admin.
func (c *KubernetesCluster) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	return c.KubectlIn(ctx, "", args...)
}

// KubectlIn is Kubectl given stdin (e.g. a manifest for `create -f -`).
func (c *KubernetesCluster) KubectlIn(ctx context.Context, stdin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.KubectlPath, append([]string{"--kubeconfig=" + c.Kubeconfig, "--request-timeout=30s"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

var notDNS = regexp.MustCompile(`[^a-z0-9]+`)

// Namespace makes a namespace of the test's own, ready for pods (its default
// ServiceAccount exists), and deletes it when the test ends.
func (c *KubernetesCluster) Namespace(t TB, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns, err := c.newNamespace(ctx, name)
	if ns != "" {
		t.Cleanup(func() { c.deleteNamespace(ns) })
	}
	if err != nil {
		t.Fatalf("%v", err)
	}
	return ns
}

// newNamespace makes a namespace named after name and a random suffix and
// waits until pods can be made in it (its default ServiceAccount exists).
// It returns the name of a namespace it made even with an error.
func (c *KubernetesCluster) newNamespace(ctx context.Context, name string) (string, error) {
	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	base := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if len(base) > 40 {
		base = strings.Trim(base[:40], "-")
	}
	ns := "t-" + base + "-" + hex.EncodeToString(rnd[:])
	if _, err := c.Kubectl(ctx, "create", "namespace", ns); err != nil {
		return "", err
	}
	for {
		if _, err := c.Kubectl(ctx, "-n", ns, "get", "serviceaccount", "default"); err == nil {
			return ns, nil
		}
		select {
		case <-ctx.Done():
			return ns, fmt.Errorf("namespace %s: no default ServiceAccount: %w", ns, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// deleteNamespace deletes ns and what is in it, without waiting.
func (c *KubernetesCluster) deleteNamespace(ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _ = c.Kubectl(ctx, "delete", "namespace", ns, "--wait=false")
}

// Kubernetes is the cluster shared by the test run (started by the first
// test that asks, stopped by StopEngines in TestMain): a test gives itself a
// namespace with Namespace. What the machine lacks skips the test (fails
// it under CI; `make test-env` builds the cluster).
func Kubernetes(t TB) *KubernetesCluster {
	t.Helper()
	c, err := sharedKubernetes()
	if m := (*Missing)(nil); errors.As(err, &m) {
		testreq.Need(t, false, m.What, m.How)
		return nil
	}
	if err != nil {
		t.Fatalf("Kubernetes test cluster: %v", err)
		return nil
	}
	return c
}

var (
	kubeMu     sync.Mutex
	kubeShared *KubernetesCluster
	kubeErr    error
)

// sharedKubernetes is the run's cluster, started on first use (and again
// after StartKubernetesAlone stopped it); a start that failed fails every
// later caller the same way.
func sharedKubernetes() (*KubernetesCluster, error) {
	kubeMu.Lock()
	defer kubeMu.Unlock()
	if kubeShared != nil || kubeErr != nil {
		return kubeShared, kubeErr
	}
	c, err := startSharedKubernetes(20 * time.Minute)
	if err != nil {
		kubeErr = err
		return nil, err
	}
	kubeShared = c
	sharedMu.Lock()
	sharedStops = append(sharedStops, func() {
		if err := stopSharedKubernetes(c); err != nil {
			fmt.Fprintln(os.Stderr, "Kubernetes test cluster stop:", err)
		}
	})
	sharedMu.Unlock()
	return c, nil
}

// stopSharedKubernetes stops c; if c was the shared cluster, the next
// sharedKubernetes starts another.
func stopSharedKubernetes(c *KubernetesCluster) error {
	kubeMu.Lock()
	if kubeShared == c {
		kubeShared = nil
	}
	kubeMu.Unlock()
	return c.Stop()
}

// StartKubernetesAlone is StartKubernetes for a test that stops its cluster
// itself (to see what stopping leaves): the run's shared cluster, if this
// process runs one, is stopped first, and a later Kubernetes(t) starts
// another. Only for a test no test using the shared cluster runs beside
// (not t.Parallel).
func StartKubernetesAlone(wait time.Duration) (*KubernetesCluster, error) {
	kubeMu.Lock()
	c := kubeShared
	kubeMu.Unlock()
	if c != nil {
		if err := stopSharedKubernetes(c); err != nil {
			return nil, fmt.Errorf("stopping the run's shared cluster first: %w", err)
		}
	}
	return StartKubernetes(wait)
}

// startKubernetesEngine is the kubernetes runtime's test engine: the run's
// shared cluster, the project's images built from the tree under test and
// imported once per cluster, and a namespace of the caller's own, deleted
// by Stop (the cluster stops with StopEngines). Its Env points agentic-mgmt
// at them and puts the agent port where pods reach it: on every address
// (harness.Start gives LISTEN_ADDR's port 0 the base port), advertised at
// the pods' bridge gateway, over TLS (each pod gets the CA); the operator
// API stays on loopback.
func startKubernetesEngine() (Engine, error) {
	c, err := sharedKubernetes()
	if err != nil {
		return Engine{}, err
	}
	agentImage, workloadImage, err := c.ProjectImages()
	if err != nil {
		return Engine{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns, err := c.newNamespace(ctx, "engine")
	if err != nil {
		if ns != "" {
			c.deleteNamespace(ns)
		}
		return Engine{}, err
	}
	return Engine{Env: []string{
		"KUBECONFIG=" + c.Kubeconfig,
		"AGENTIC_K8S_NAMESPACE=" + ns,
		"AGENTIC_K8S_AGENT_IMAGE=" + agentImage,
		"AGENTIC_K8S_IMAGE=" + workloadImage,
		"AGENTIC_K8S_PULL_POLICY=Never",
		"LISTEN_ADDR=0.0.0.0:0",
		"AGENTIC_ADVERTISE_HOST=" + KubernetesGateway,
		"AGENTIC_AGENT_TLS=auto",
		"AGENTIC_OPERATOR_HOST=127.0.0.1",
		// The test cluster enforces no NetworkPolicy: the runtime's
		// default is the open pod network, which must be allowed.
		"AGENTIC_ALLOWED_NETWORKS=none,proxy,bridge",
	}, stop: func() { c.deleteNamespace(ns) }}, nil
}

// ProjectImages are ImportProjectImages's images of the agent the tests
// run (BuildShared: the tree under test), built and imported once per
// cluster.
func (c *KubernetesCluster) ProjectImages() (agentImage, workloadImage string, err error) {
	c.imagesOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		bins, err := BuildShared(ctx)
		if err != nil {
			c.imagesErr = err
			return
		}
		dir, err := os.MkdirTemp("", "agentic-k8s-images-")
		if err != nil {
			c.imagesErr = err
			return
		}
		defer os.RemoveAll(dir) // imported: the archives are no longer needed
		c.agentImage, c.workloadImage, c.imagesErr = c.ImportProjectImages(ctx, bins.Agent, dir)
	})
	return c.agentImage, c.workloadImage, c.imagesErr
}

// ImportProjectImages builds the project's agent and default workload
// images (internal/ociimage, as `make agent-image` does) from the static
// agent binary the tests built, into dir, and imports them into the
// cluster's containerd, so that pods run the agent of the tree under test.
// It returns their references as the kubelet resolves them (docker.io/…).
func (c *KubernetesCluster) ImportProjectImages(ctx context.Context, agentBinary, dir string) (agentImage, workloadImage string, err error) {
	// Tagged by the agent's own hash: test runs of other trees share the
	// cluster (and its image store), and must not run each other's agent.
	bin, err := os.ReadFile(agentBinary)
	if err != nil {
		return "", "", err
	}
	sum := sha256.Sum256(bin)
	built, err := ociimage.Build(dir, agentBinary, "", "test-"+hex.EncodeToString(sum[:6]))
	if err != nil {
		return "", "", err
	}
	for _, b := range built {
		if err := c.ImportImage(ctx, b.Path); err != nil {
			return "", "", err
		}
		switch {
		case strings.HasPrefix(b.Ref, ociimage.AgentRepository+":"):
			agentImage = b.Ref
		case strings.HasPrefix(b.Ref, ociimage.WorkloadRepository+":"):
			workloadImage = b.Ref
		}
	}
	if agentImage == "" || workloadImage == "" {
		return "", "", fmt.Errorf("ociimage.Build made %v: want the agent and the workload image", built)
	}
	return agentImage, workloadImage, nil
}

// ImportImage imports an image archive into the cluster's containerd (the
// node's image store: pods with imagePullPolicy IfNotPresent or Never find it).
func (c *KubernetesCluster) ImportImage(ctx context.Context, archive string) error {
	snap := "overlayfs"
	if data, err := os.ReadFile(filepath.Join(c.State, "run", "containerd", "config.toml")); err == nil && bytes.Contains(data, []byte(`snapshotter = "native"`)) {
		snap = "native"
	}
	out, err := exec.CommandContext(ctx, "ctr", "-a", filepath.Join(c.State, "containerd.sock"), "-n", "k8s.io",
		"images", "import", "--snapshotter", snap, archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %v: %s", archive, err, out)
	}
	return nil
}
