package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/kubernetes"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/ociimage"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
)

// The kubernetes runtime end to end (issue 28): the real agentic-mgmt,
// agenticctl and agentic-agent, environments as pods of the run's test
// cluster (harness engine "kubernetes": a namespace of the test's own, the
// project's images built from this tree and imported, the agent port on
// every address and advertised at the pods' bridge gateway over TLS).
// What the adapter alone promises is in cmd/internal/runtimetest; these
// go through REST, the WebSocket and the CLI. Each test has its own server
// and namespace; the cluster is shared by the run.

// kubeRig is one test's agentic-mgmt on the test cluster, and an outside
// view of the namespace it uses (client-go, kubectl).
type kubeRig struct {
	t   *testing.T
	c   *harness.KubernetesCluster
	ns  string
	cli k8s.Interface
	s   *harness.Server
}

// startKubeServer runs agentic-mgmt with only the kubernetes runtime on a
// namespace of the test's own; env is added last.
func startKubeServer(t *testing.T, env ...string) *kubeRig {
	t.Helper()
	start := time.Now()
	eng := harness.NeedEngine(t, "kubernetes")
	t.Logf("kubernetes engine ready in %v (the run's first also waits for the machine's cluster lock, starts the cluster and imports the images)", time.Since(start).Round(10*time.Millisecond))
	c := harness.Kubernetes(t)
	ns := eng.Getenv("AGENTIC_K8S_NAMESPACE")
	if ns == "" {
		t.Fatalf("the kubernetes engine gave no namespace: %v", eng.Env)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := k8s.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	all := append(append([]string{"AGENTIC_RUNTIMES=kubernetes"}, eng.Env...), env...)
	s := startServer(t, 0, t.TempDir(), all...)
	return &kubeRig{t: t, c: c, ns: ns, cli: cli, s: s}
}

// kubeWait polls cond every 100 ms (each poll may ask the cluster) until it
// holds, for at most patience.
func kubeWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, patience)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func kubeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), patience)
}

// objects are the pods, Secrets and NetworkPolicies of the namespace that
// belong to environment name (by the adapter's annotation, whoever made
// them), as kind/object-name.
func (k *kubeRig) objects(name string) []string {
	k.t.Helper()
	ctx, cancel := kubeCtx()
	defer cancel()
	var out []string
	pods, err := k.cli.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Annotations[kubernetes.AnnotationEnv] == name {
			out = append(out, "pod/"+p.Name)
		}
	}
	secs, err := k.cli.CoreV1().Secrets(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	for _, s := range secs.Items {
		if s.Annotations[kubernetes.AnnotationEnv] == name {
			out = append(out, "secret/"+s.Name)
		}
	}
	pols, err := k.cli.NetworkingV1().NetworkPolicies(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	for _, p := range pols.Items {
		if p.Annotations[kubernetes.AnnotationEnv] == name {
			out = append(out, "networkpolicy/"+p.Name)
		}
	}
	return out
}

// wantKinds checks environment name has one object of each kind and no other.
func (k *kubeRig) wantKinds(name string, kinds ...string) {
	k.t.Helper()
	objs := k.objects(name)
	var got []string
	for _, o := range objs {
		kind, _, _ := strings.Cut(o, "/")
		got = append(got, kind)
	}
	if !slices.Equal(got, kinds) {
		k.t.Fatalf("%s has %v in the cluster, want one each of %v", name, objs, kinds)
	}
}

// pods are the namespace's pods of environment name.
func (k *kubeRig) pods(name string) []corev1.Pod {
	k.t.Helper()
	ctx, cancel := kubeCtx()
	defer cancel()
	list, err := k.cli.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelManaged + "=true"})
	if err != nil {
		k.t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Annotations[kubernetes.AnnotationEnv] == name {
			out = append(out, p)
		}
	}
	return out
}

// onePod is environment name's only pod.
func (k *kubeRig) onePod(name string) corev1.Pod {
	k.t.Helper()
	pods := k.pods(name)
	if len(pods) != 1 {
		k.t.Fatalf("%s has %d pods, want 1: %v", name, len(pods), k.objects(name))
	}
	return pods[0]
}

// kubectlDeletePod deletes a pod behind agentic-mgmt's back, as an
// operator would.
func (k *kubeRig) kubectlDeletePod(pod string) {
	k.t.Helper()
	ctx, cancel := kubeCtx()
	defer cancel()
	if out, err := k.c.Kubectl(ctx, "-n", k.ns, "delete", "pod", pod, "--wait=true"); err != nil {
		k.t.Fatalf("%v %s", err, out)
	}
}

// env GETs an environment: its body and status.
func (k *kubeRig) env(name string) (restapi.Environment, int, string) {
	k.t.Helper()
	ctx, cancel := kubeCtx()
	defer cancel()
	got, err := k.s.Client().GetEnvironmentWithResponse(ctx, name)
	if err != nil {
		k.t.Fatal(err)
	}
	if got.JSON200 == nil {
		return restapi.Environment{}, got.StatusCode(), string(got.Body)
	}
	return *got.JSON200, got.StatusCode(), string(got.Body)
}

// waitEnv waits until environment name is in state want (failing at once
// on a failed one, unless that is wanted) and returns it.
func (k *kubeRig) waitEnv(name string, want restapi.EnvironmentState) restapi.Environment {
	k.t.Helper()
	var e restapi.Environment
	var body string
	kubeWait(k.t, name+" "+string(want), func() bool {
		e, _, body = k.env(name)
		if e.State == restapi.EnvFailed && want != restapi.EnvFailed {
			k.t.Fatalf("%s failed: %s", name, body)
		}
		return e.State == want
	})
	return e
}

// create POSTs an environment and waits until it is ready.
func (k *kubeRig) create(req restapi.CreateEnvironmentRequest) restapi.Environment {
	k.t.Helper()
	ctx, cancel := kubeCtx()
	defer cancel()
	r, err := k.s.Client().CreateEnvironmentWithResponse(ctx, req)
	if err != nil || r.JSON202 == nil {
		k.t.Fatalf("create %s: %v %d %s", req.Name, err, r.StatusCode(), r.Body)
	}
	return k.waitEnv(req.Name, restapi.EnvReady)
}

// remove DELETEs an environment: once answered, it is gone from the cluster.
func (k *kubeRig) remove(name string) {
	k.t.Helper()
	ctx, cancel := kubeCtx()
	defer cancel()
	d, err := k.s.Client().DeleteEnvironmentWithResponse(ctx, name)
	if err != nil || d.StatusCode() >= 300 {
		k.t.Fatalf("delete %s: %v %d %s", name, err, d.StatusCode(), d.Body)
	}
	if _, st, body := k.env(name); st != http.StatusNotFound {
		k.t.Fatalf("%s after its delete: %d %s", name, st, body)
	}
	if left := k.objects(name); len(left) > 0 {
		k.t.Fatalf("%s deleted, but the cluster still has %v", name, left)
	}
}

// sh runs a shell script in environment name through REST.
func (k *kubeRig) sh(name, script string) restapi.ExecResult {
	k.t.Helper()
	return execOK(k.t, k.s, name, restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", script})})
}

// kubeRuntime is the kubernetes runtime as GET /api/v1/runtimes lists it.
func (k *kubeRig) kubeRuntime() restapi.Runtime {
	k.t.Helper()
	ctx, cancel := kubeCtx()
	defer cancel()
	r, err := k.s.Client().ListRuntimesWithResponse(ctx)
	if err != nil || r.JSON200 == nil {
		k.t.Fatalf("runtimes: %v %s", err, r.Body)
	}
	for _, rt := range r.JSON200.Runtimes {
		if rt.Runtime == kubernetes.RuntimeName {
			return rt
		}
	}
	k.t.Fatalf("the kubernetes runtime is not offered: %s", r.Body)
	return restapi.Runtime{}
}

func eventSteps(e restapi.Environment) []string {
	var out []string
	for _, ev := range e.Events {
		out = append(out, ev.Step)
	}
	return out
}

// kubeDialWS is dialWS for a server whose agent port speaks TLS: the client
// WebSocket is plain HTTP beside REST on the operator host.
func kubeDialWS(t *testing.T, s *harness.Server) *wsViewer {
	t.Helper()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.RESTURL, "http://"))
	p, _ := strconv.Atoi(port)
	h := http.Header{}
	h.Set("Authorization", "Bearer "+s.Token)
	ws, _, err := websocket.DefaultDialer.Dial(fmt.Sprintf("ws://127.0.0.1:%d/ws", p-1), h)
	if err != nil {
		t.Fatalf("the client WebSocket: %v", err)
	}
	v := &wsViewer{t: t, ws: ws, out: map[string][]byte{}, next: map[string]uint64{}, notify: make(chan struct{}, 1)}
	go v.read()
	t.Cleanup(func() { ws.Close() })
	return v
}

// kubeTmuxImageRef is an image of any kind the project does not build: the
// default workload image with the machine's tmux (dynamically linked: its
// libraries, its loader and the terminfo database come along) added.
const kubeTmuxImageRef = "localhost/agentic-test/tmux:1"

var (
	kubeTmuxMu       sync.Mutex
	kubeTmuxImported = map[*harness.KubernetesCluster]bool{}
)

// kubeTmuxImage builds the tmux image and imports it into c's containerd
// (once per cluster), returning its reference.
func kubeTmuxImage(t *testing.T, c *harness.KubernetesCluster) string {
	t.Helper()
	testreq.Command(t, "tmux", "run make test-env")
	kubeTmuxMu.Lock()
	defer kubeTmuxMu.Unlock()
	if kubeTmuxImported[c] {
		return kubeTmuxImageRef
	}
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Fatal(err)
	}
	files := []string{tmux}
	out, err := exec.Command("ldd", tmux).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", tmux, err)
	}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "/") {
			files = append(files, f)
		}
	}
	// tmux wants a UTF-8 locale (glibc's C.UTF-8 is files) and the
	// terminal's description.
	terminfo, _ := filepath.Glob("/lib/terminfo/*/*")
	locale, _ := filepath.Glob("/usr/lib/locale/C.utf8/*")
	messages, _ := filepath.Glob("/usr/lib/locale/C.utf8/LC_MESSAGES/*")
	for _, f := range append(append(terminfo, locale...), messages...) {
		if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() {
			files = append(files, f)
		}
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	dirs := map[string]bool{}
	var addDir func(string)
	addDir = func(d string) {
		if d == "." || d == "/" || dirs[d] {
			return
		}
		addDir(path.Dir(d))
		dirs[d] = true
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f) // through symlinks: the file itself
		if err != nil {
			t.Fatal(err)
		}
		addDir(path.Dir(f))
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f, "/"), Mode: 0o755, Size: int64(len(b))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	base, err := ociimage.Workload("")
	if err != nil {
		t.Fatal(err)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(base, l)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "tmux.tar")
	if err := ociimage.WriteArchive(archive, kubeTmuxImageRef, img); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := kubeCtx()
	defer cancel()
	if err := c.ImportImage(ctx, archive); err != nil {
		t.Fatal(err)
	}
	kubeTmuxImported[c] = true
	return kubeTmuxImageRef
}

// An environment's life as a pod: created through the CLI with its steps
// shown (scheduled, image pulled, started, agent ready) on an image of any
// kind, used through REST (exec, files) and the WebSocket (a shell kept in
// tmux, typed into, left and joined again), the closed network modes
// refused where the cluster's policies are not declared enforced, and
// deleted leaving no pod, Secret or NetworkPolicy.
func TestKubernetesRuntimeEnvironmentLife(t *testing.T) {
	// Every network mode allowed by the server: what is refused below is
	// refused by the runtime, which does not offer it.
	k := startKubeServer(t, "AGENTIC_ALLOWED_NETWORKS=none,proxy,bridge")
	image := kubeTmuxImage(t, k.c)
	const name = "k-life"

	// Without AGENTIC_K8S_NETWORK_POLICY=enforced only the pod network is
	// offered: nothing could close it.
	if rt := k.kubeRuntime(); !slices.Equal(rt.NetworkModes, []string{"bridge"}) || !slices.Equal(rt.AllowedNetworkModes, []string{"bridge"}) ||
		rt.Isolation != "container" || !rt.Images || !rt.Placement {
		t.Fatalf("the kubernetes runtime as listed: %+v", rt)
	}
	for _, network := range []string{"proxy", "none"} {
		req := restapi.CreateEnvironmentRequest{Runtime: "kubernetes", Name: name + "-" + network, Network: ptr(network)}
		if network == "proxy" {
			req.AllowedHosts = &[]string{"example.com:443"}
		}
		ctx, cancel := kubeCtx()
		r, err := k.s.Client().CreateEnvironmentWithResponse(ctx, req)
		cancel()
		if err != nil || r.StatusCode() != http.StatusBadRequest || !strings.Contains(string(r.Body), `the kubernetes runtime offers bridge`) {
			t.Fatalf("network %s without enforced policies: %v %d %s", network, err, r.StatusCode(), r.Body)
		}
		if left := k.objects(req.Name); len(left) > 0 {
			t.Fatalf("a refused create left %v", left)
		}
	}

	// Created through the CLI, which shows the pod's steps as they come.
	t.Cleanup(func() { ctl(t, k.s.RESTURL, k.s.Token, "env", "rm", name) })
	out, errOut, code := ctl(t, k.s.RESTURL, k.s.Token, "env", "create", "--runtime", "kubernetes", "--image", image, "--profile", "root", name)
	if code != 0 || !strings.Contains(out, name+": ready") {
		t.Fatalf("create: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	e, _, body := k.env(name)
	steps := eventSteps(e)
	at := -1
	for _, want := range []string{"scheduled", "image_pulled", "started", "agent_ready"} {
		i := slices.Index(steps, want)
		if i <= at {
			t.Fatalf("events %v: want scheduled, image_pulled, started, agent_ready in order\n%s", steps, body)
		}
		at = i
		if !strings.Contains(errOut, want) {
			t.Errorf("the CLI did not show %s: %q", want, errOut)
		}
	}
	pod := k.onePod(name)
	if e.State != restapi.EnvReady || e.Runtime != "kubernetes" || deref(e.RuntimeId) != string(pod.UID) || deref(e.Image) != image {
		t.Fatalf("the environment %s; its pod %s (uid %s)", body, pod.Name, pod.UID)
	}
	// Ready comes with the agent; the kubelet reports the pod running at
	// its next status round, up to a second later.
	eventually(t, patience, "pod "+pod.Name+" running", func() bool {
		pod = k.onePod(name)
		return pod.Status.Phase == corev1.PodRunning
	})
	if pod.Spec.Containers[0].Image != image {
		t.Fatalf("pod %s: image %s, want %s", pod.Name, pod.Spec.Containers[0].Image, image)
	}
	if e.ProvisionMs != nil {
		t.Logf("created → agent ready in %d ms (steps %v)", *e.ProvisionMs, steps)
	}

	// Commands run in the pod.
	if got := k.sh(name, "echo from-$AGENT_RUNTIME uid-$(id -u) host-$(hostname)").Stdout; got != "from-container uid-0 host-"+name+"\n" {
		t.Fatalf("exec in the pod: %q", got)
	}

	// Files in and out, whole, as the pod's own commands see them.
	blob := make([]byte, 3<<20)
	_, _ = rand.Read(blob)
	sum := sha256.Sum256(blob)
	putFile(t, k.s, name, "/tmp/blob", blob, "0640")
	st, down := fileDo(t, k.s, http.MethodGet, fileURL(k.s, name, "/content", "/tmp/blob"), nil)
	if st != http.StatusOK || !bytes.Equal(down, blob) {
		t.Fatalf("download: %d, %d bytes (want the %d uploaded)", st, len(down), len(blob))
	}
	if got := k.sh(name, "sha256sum /tmp/blob; stat -c %a /tmp/blob").Stdout; got != hex.EncodeToString(sum[:])+"  /tmp/blob\n640\n" {
		t.Fatalf("the upload as the pod sees it: %q", got)
	}

	// A shell kept in tmux: typed into, left, joined again with its
	// history, typed into again.
	v := kubeDialWS(t, k.s)
	v.send(map[string]any{"type": "start_shell", "id": "1", "agent_id": name, "cols": 100, "rows": 30})
	shell := v.waitFor("session_started", func(f map[string]any) bool { return f["type"] == "session_started" })["session_id"].(string)
	v.waitFor("controller", func(f map[string]any) bool { return f["type"] == "role_changed" && f["role"] == "controller" })
	typeUntil(t, v, k.s, shell, "echo pod-$((6*7))", regexp.MustCompile(`pod-42`))
	if got := k.sh(name, "tmux ls -F '#{session_name}'").Stdout; !strings.HasPrefix(got, "as-") {
		t.Fatalf("the shell is not kept in tmux in the pod: tmux ls %q", got)
	}
	v.ws.Close()
	v2 := kubeDialWS(t, k.s)
	v2.send(map[string]any{"type": "join_session", "session_id": shell, "role": "controller", "replay_from": 0})
	v2.waitFor("controller", func(f map[string]any) bool { return f["type"] == "role_changed" && f["role"] == "controller" })
	v2.waitOutput(shell, regexp.MustCompile(`pod-42`))
	typeUntil(t, v2, k.s, shell, "echo again-$((50+50))", regexp.MustCompile(`again-100`))
	if st := sessionState(t, k.s, shell); st != restapi.SessionStateSessionRunning {
		t.Fatalf("the shell is %s", st)
	}

	// Deleted: nothing of it is left in the cluster (a bridge environment
	// has no NetworkPolicy).
	k.wantKinds(name, "pod", "secret")
	k.remove(name)
}

// Egress of a proxy environment where the cluster's NetworkPolicies are
// declared enforced: the environment gets its policy (in nothing, out only
// to the agent port), and its commands reach exactly the allowed hosts
// through the agent's proxy and the agent link. The test cluster's bridge
// CNI does not enforce NetworkPolicies, so this proves the policy is made
// and the agent-link path works, not that the pod network is closed (the
// destinations listen on the host's loopback and the pod has no DNS: only
// the tunnel reaches them).
func TestKubernetesRuntimeEgressThroughTheAgent(t *testing.T) {
	k := startKubeServer(t, append([]string{"AGENTIC_K8S_NETWORK_POLICY=enforced"}, egressEnv...)...)
	const name = "k-egress"
	if rt := k.kubeRuntime(); !slices.Equal(rt.NetworkModes, []string{"none", "proxy", "bridge"}) {
		t.Fatalf("network modes with enforced policies: %v", rt.NetworkModes)
	}

	site := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello from the allowed host") }))
	t.Cleanup(site.Close)
	_, port, _ := net.SplitHostPort(site.Listener.Addr().String())
	other := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "must not be reached") }))
	t.Cleanup(other.Close)
	_, otherPort, _ := net.SplitHostPort(other.Listener.Addr().String())

	t.Cleanup(func() { ctl(t, k.s.RESTURL, k.s.Token, "env", "rm", name) })
	// The test name resolves to loopback (AGENTIC_TEST_RESOLVE), allowed by address.
	allowed := []string{"example.com:" + port, "127.0.0.1:" + port}
	k.create(restapi.CreateEnvironmentRequest{Runtime: "kubernetes", Name: name, Network: ptr("proxy"), AllowedHosts: &allowed})

	// Its policy selects its pod and lets nothing in and only the agent
	// port out.
	ctx, cancel := kubeCtx()
	defer cancel()
	pod := k.onePod(name)
	pols, err := k.cli.NetworkingV1().NetworkPolicies(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, p := range pols.Items {
		if p.Annotations[kubernetes.AnnotationEnv] != name {
			continue
		}
		found = true
		for key, val := range p.Spec.PodSelector.MatchLabels {
			if pod.Labels[key] != val {
				t.Errorf("policy %s selects %s=%s; the pod has %v", p.Name, key, val, pod.Labels)
			}
		}
		_, agentPort, _ := net.SplitHostPort(k.s.AgentAddr())
		eg := p.Spec.Egress
		if len(p.Spec.Ingress) != 0 || len(p.Spec.PolicyTypes) != 2 || len(eg) != 1 || len(eg[0].To) != 1 || eg[0].To[0].IPBlock == nil ||
			eg[0].To[0].IPBlock.CIDR != harness.KubernetesGateway+"/32" || len(eg[0].Ports) != 1 || eg[0].Ports[0].Port.String() != agentPort {
			t.Errorf("policy %s: %+v; want nothing in, out only to %s:%s", p.Name, p.Spec, harness.KubernetesGateway, agentPort)
		}
	}
	if !found {
		t.Fatalf("no NetworkPolicy for %s: %v", name, k.objects(name))
	}

	putFile(t, k.s, name, "/tmp/egressclient", egressClient(t), "0755")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: site.Certificate().Raw})
	ca = append(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: other.Certificate().Raw})...)
	putFile(t, k.s, name, "/tmp/ca.pem", ca, "0644")
	fetch := func(url string) string {
		t.Helper()
		r := execOK(t, k.s, name, restapi.ExecRequest{Command: "/tmp/egressclient", Args: ptr([]string{url, "/tmp/ca.pem"})})
		return r.Stdout + r.Stderr
	}
	if got := k.sh(name, "echo $HTTPS_PROXY").Stdout; got != "http://127.0.0.1:3128\n" {
		t.Errorf("the commands' proxy: %q", got)
	}
	if got := fetch("https://example.com:" + port + "/"); !strings.Contains(got, "STATUS 200") || !strings.Contains(got, "hello from the allowed host") {
		t.Fatalf("the allowed host: %q", got)
	}
	for url, why := range map[string]string{
		"https://denied.example.org:" + port + "/": "matches no allowed host",
		"https://loop.test:" + otherPort + "/":     "not allowed",
	} {
		if got := fetch(url); !strings.Contains(got, "ERR") || !strings.Contains(got, "Forbidden") {
			t.Errorf("%s (%s): %q", url, why, got)
		}
	}
	e, _, body := k.env(name)
	var sawAllowed, sawDenied bool
	for _, eg := range derefSlice(e.Egress) {
		sawAllowed = sawAllowed || eg.Host == "example.com" && eg.Allowed
		sawDenied = sawDenied || eg.Host == "denied.example.org" && !eg.Allowed
	}
	if !sawAllowed || !sawDenied {
		t.Errorf("the environment's egress: %s", body)
	}

	// Deleted with its policy.
	k.wantKinds(name, "pod", "secret", "networkpolicy")
	k.remove(name)
}

// lastTick is the highest tick-N line of a ticker's output, -1 for none.
func lastTick(out []byte) int {
	last := -1
	for _, m := range tickRE.FindAllSubmatch(out, -1) {
		if n, _ := strconv.Atoi(string(m[1])); n > last {
			last = n
		}
	}
	return last
}

func derefSlice[T any](p *[]T) []T {
	if p == nil {
		return nil
	}
	return *p
}

// agentic-mgmt killed (-9) and started again on its data dir adopts the
// running pod: the environment is ready again on the same pod (its files
// as they were), commands run, a session started before is back and still
// writing, and no second pod was made.
func TestKubernetesRuntimeAdoptedAfterARestart(t *testing.T) {
	k := startKubeServer(t)
	const name = "k-adopt"
	t.Cleanup(func() { ctl(t, k.s.RESTURL, k.s.Token, "env", "rm", name) })
	before := k.create(restapi.CreateEnvironmentRequest{Runtime: "kubernetes", Name: name})
	pod := k.onePod(name)
	if got := k.sh(name, "echo before > /tmp/mark; echo uid-$(id -u)").Stdout; got != "uid-65534\n" {
		t.Fatalf("exec: %q", got)
	}
	bg := restapi.SessionBackground
	ticker := createSession(t, k.s, name, restapi.CreateSessionRequest{Type: &bg, Name: ptr("ticker"), Command: "sh",
		Args: ptr([]string{"-c", "i=0; while :; do echo tick-$i; i=$((i+1)); sleep 0.2; done"})}).SessionId
	waitTicks(t, k.s, ticker, 3)

	k.s.Kill()
	restarted := time.Now()
	s2 := restart(t, k.s)
	k.s = s2
	after := k.waitEnv(name, restapi.EnvReady)
	t.Logf("restarted agentic-mgmt → the adopted environment ready in %v", time.Since(restarted).Round(10*time.Millisecond))
	if got := k.sh(name, "cat /tmp/mark").Stdout; got != "before\n" {
		t.Fatalf("after the restart: %q", got)
	}
	again := k.onePod(name)
	if again.UID != pod.UID || deref(after.RuntimeId) != string(pod.UID) || deref(before.RuntimeId) != string(pod.UID) {
		t.Fatalf("pod %s before the restart, %s after; the environment says %s", pod.UID, again.UID, deref(after.RuntimeId))
	}
	// The session is back and still writing, with no line lost: it is
	// not kept in tmux (the default image has none), but the agent keeps
	// its output until the server acknowledges it stored, and sends what
	// a killed server never stored again.
	waitBack(t, s2, ticker)
	last := lastTick(readOutput(t, s2, ticker))
	kubeWait(t, "the session writing after the restart", func() bool { return lastTick(readOutput(t, s2, ticker)) >= last+3 })
	if out := readOutput(t, s2, ticker); ticks(t, out) == 0 {
		t.Fatalf("no ticks read back:\n%q", out)
	}
	k.remove(name)
}

// A pod deleted behind agentic-mgmt's back (kubectl delete pod) marks its
// environment failed with the reason; a warm pool on kubernetes replaces a
// member whose pod is deleted, and a matching create is taken from it.
func TestKubernetesRuntimePodDeletedAndPoolRefilled(t *testing.T) {
	k := startKubeServer(t)
	const name, pool = "k-gone", "kwarm"
	t.Cleanup(func() { ctl(t, k.s.RESTURL, k.s.Token, "env", "rm", name) })
	k.create(restapi.CreateEnvironmentRequest{Runtime: "kubernetes", Name: name})
	k.kubectlDeletePod(k.onePod(name).Name)
	failed := k.waitEnv(name, restapi.EnvFailed)
	if msg := deref(failed.Error); !strings.Contains(msg, "deleted outside agentic-sandbox") {
		t.Fatalf("the environment of a deleted pod: error %q; want the reason", msg)
	}
	// Deleting it removes what is left (its Secret).
	k.wantKinds(name, "secret")
	k.remove(name)

	ctx, cancel := kubeCtx()
	defer cancel()
	t.Cleanup(func() { _, _ = k.s.Client().DeletePoolWithResponse(context.Background(), pool) })
	if r, err := k.s.Client().PutPoolWithResponse(ctx, pool, restapi.PoolRequest{Runtime: "kubernetes", Size: 2}); err != nil || r.StatusCode() >= 300 {
		t.Fatalf("put pool: %v %s", err, r.Body)
	}
	full := waitPool(t, k.s, pool, 2, patience)
	victim, kept := full.Members[0].Name, full.Members[1].Name
	victimPod := k.onePod(victim)
	k.kubectlDeletePod(victimPod.Name)
	deleted := time.Now()
	var refilled restapi.Pool
	kubeWait(t, "the member whose pod was deleted replaced", func() bool {
		got, err := k.s.Client().GetPoolWithResponse(context.Background(), pool)
		if err != nil || got.JSON200 == nil {
			return false
		}
		refilled = *got.JSON200
		names := memberNames(refilled)
		return refilled.Idle == 2 && len(names) == 2 && !slices.Contains(names, victim) && slices.Contains(names, kept)
	})
	t.Logf("a member's pod deleted → replaced by an idle one in %v", time.Since(deleted).Round(10*time.Millisecond))
	kubeWait(t, "the replaced member's objects removed", func() bool { return len(k.objects(victim)) == 0 })
	keptPod := k.onePod(kept)

	// A create of the pool's spec takes a member, ready at once.
	const taker = "k-taken"
	t.Cleanup(func() { ctl(t, k.s.RESTURL, k.s.Token, "env", "rm", taker) })
	taken := k.create(restapi.CreateEnvironmentRequest{Runtime: "kubernetes", Name: taker})
	var member string
	fromPool := false
	for _, ev := range taken.Events {
		if ev.Step == "agent_ready" && strings.Contains(deref(ev.Message), "from a pool") {
			fromPool = true
			t.Logf("taken: agent_ready %s", deref(ev.Message))
		}
		for _, m := range memberNames(refilled) {
			if ev.Step == "taken" && strings.Contains(deref(ev.Message), m) {
				member = m
			}
		}
	}
	if !fromPool || member == "" {
		t.Fatalf("%s not taken from pool members %v: events %+v", taker, memberNames(refilled), taken.Events)
	}
	if got := k.sh(taker, "echo id=$AGENT_ID").Stdout; got != "id="+taker+"\n" {
		t.Fatalf("the taken member's commands see %q", got)
	}
	if member == kept && k.onePod(member).UID != keptPod.UID {
		t.Fatalf("the taken member's pod was replaced")
	}
	if p := waitPool(t, k.s, pool, 2, patience); p.Hits != 1 || slices.Contains(memberNames(p), member) {
		t.Fatalf("the pool after the take: %+v", p)
	}
	k.remove(taker)
	if left := k.objects(member); len(left) > 0 {
		t.Fatalf("the taken member's objects after its delete: %v", left)
	}
}

// A spec the node cannot hold (far more CPUs than it has) fails promptly
// with the scheduler's reason, well before the start timeout (5 minutes;
// the wait below is patience), and leaves no pod or Secret.
func TestKubernetesRuntimeUnschedulable(t *testing.T) {
	k := startKubeServer(t)
	const name = "k-huge"
	t.Cleanup(func() { ctl(t, k.s.RESTURL, k.s.Token, "env", "rm", name) })
	ctx, cancel := kubeCtx()
	defer cancel()
	asked := time.Now()
	r, err := k.s.Client().CreateEnvironmentWithResponse(ctx, restapi.CreateEnvironmentRequest{Runtime: "kubernetes", Name: name,
		Resources: &restapi.Resources{Cpus: ptr(float32(512))}})
	if err != nil || r.JSON202 == nil {
		t.Fatalf("create: %v %d %s", err, r.StatusCode(), r.Body)
	}
	e := k.waitEnv(name, restapi.EnvFailed)
	t.Logf("unschedulable → failed in %v: %s", time.Since(asked).Round(10*time.Millisecond), deref(e.Error))
	if msg := deref(e.Error); !strings.Contains(msg, "Insufficient cpu") || strings.Contains(msg, "did not run within") {
		t.Fatalf("error %q; want the scheduler's reason (Insufficient cpu), not a timeout", msg)
	}
	if left := k.objects(name); len(left) > 0 {
		t.Fatalf("an unschedulable environment left %v", left)
	}
	k.remove(name)
}

// A task on the kubernetes runtime: its repository staged over the agent
// link into a pod, its command run headless there as nobody with its
// secret, its artifact and patch collected, and its pod gone after.
func TestKubernetesRuntimeTask(t *testing.T) {
	repo := baseRepo(t, "a")
	k := startKubeServer(t, "TASK_TEST_TOKEN="+taskSecret)
	e := &taskEnv{t: t, s: k.s, repo: repo}
	tk := e.run(`
repository: {url: ` + repo + `}
command: {argv: [sh, -c, "echo changed > a.txt && echo \"uid=$(id -u) runtime=$AGENT_RUNTIME token=${#MY_TOKEN}\" > REPORT.md"]}
environment: {runtime: kubernetes}
secrets: [{name: MY_TOKEN, source: env, key: TASK_TEST_TOKEN}]
lifecycle: {artifact_patterns: [REPORT.md]}
`)
	if tk.State != "completed" || tk.Environment.Runtime != "kubernetes" {
		t.Fatalf("task: %s on %s: %s %s", tk.State, tk.Environment.Runtime, deref(tk.Reason), deref(tk.Error))
	}
	_, report := fileDo(t, k.s, http.MethodGet, k.s.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts/REPORT.md", nil)
	if string(report) != "uid=65534 runtime=container token="+strconv.Itoa(len(taskSecret))+"\n" {
		t.Errorf("REPORT.md %q: want the run as nobody in the pod with its secret", report)
	}
	_, patch := fileDo(t, k.s, http.MethodGet, k.s.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts/changes.patch", nil)
	if !bytes.Contains(patch, []byte("+changed")) {
		t.Errorf("patch: %s", patch)
	}
	e.noEnvironmentsLeft()
	kubeWait(t, "the task's pod and Secret gone", func() bool {
		ctx, cancel := kubeCtx()
		defer cancel()
		pods, err1 := k.cli.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelManaged + "=true"})
		secs, err2 := k.cli.CoreV1().Secrets(k.ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelManaged + "=true"})
		return err1 == nil && err2 == nil && len(pods.Items) == 0 && len(secs.Items) == 0
	})
}
