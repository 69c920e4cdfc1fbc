package runtimetest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/kubernetes"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/internal/secret"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

// kube is the run's test cluster seen from one test: its own namespace, an
// agent link pods reach over TLS at the bridge gateway, the project's
// images imported, and an outside client (anything not the adapter).
type kube struct {
	cluster *harness.KubernetesCluster
	ns      string
	link    *Link
	cfg     kubernetes.Config
	cli     k8s.Interface
}

func startKube(t *testing.T) *kube {
	t.Helper()
	c := harness.Kubernetes(t)
	ns := c.Namespace(t, t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	agentImage, workloadImage, err := c.ImportProjectImages(ctx, AgentBinary(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	link := StartLink(t, linkDir(t))
	port, ca := link.ServeTLS(t, []string{harness.KubernetesGateway})
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := k8s.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return &kube{cluster: c, ns: ns, link: link, cli: cli, cfg: kubernetes.Config{
		Kubeconfig: c.Kubeconfig, Namespace: ns, Owner: "conf",
		AgentImage: agentImage, DefaultImage: workloadImage, DefaultImageHasAgent: true, PullPolicy: corev1.PullNever,
		ServerURL: "https://" + harness.KubernetesGateway + ":" + strconv.Itoa(port), CA: ca,
		StartTimeout: 2 * time.Minute, StopGrace: 2 * time.Second,
	}}
}

func (k *kube) runtime(t *testing.T, mutate func(*kubernetes.Config)) *kubernetes.Runtime {
	t.Helper()
	cfg := k.cfg
	if mutate != nil {
		mutate(&cfg)
	}
	rt, err := kubernetes.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// leftovers lists every pod, Secret and NetworkPolicy of the namespace
// naming the environment, whoever's.
func (k *kube) leftovers(t *testing.T, name string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var left []string
	pods, err := k.cli.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Annotations[kubernetes.AnnotationEnv] == name {
			left = append(left, "pod "+p.Name)
		}
	}
	secs, err := k.cli.CoreV1().Secrets(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secs.Items {
		if s.Annotations[kubernetes.AnnotationEnv] == name {
			left = append(left, "secret "+s.Name)
		}
	}
	pols, err := k.cli.NetworkingV1().NetworkPolicies(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pols.Items {
		if p.Annotations[kubernetes.AnnotationEnv] == name {
			left = append(left, "networkpolicy "+p.Name)
		}
	}
	return left
}

// TestKubernetes runs everything against the run's test cluster: the
// conformance suite, then what only the kubernetes runtime promises.
func TestKubernetes(t *testing.T) {
	k := startKube(t)
	t.Run("Conformance", func(t *testing.T) {
		rt := k.runtime(t, nil)
		base := ports.EnvironmentSpec{
			ReadOnlyRoot: true,
			Resources:    ports.Resources{CPUs: 0.5, MemoryMB: 256, DiskGB: 1},
		}
		portstest.RunRuntimeSuite(t, k.link.Harness(rt, base, k.leftovers))
	})
	t.Run("Hardening", func(t *testing.T) { kubeHardening(t, k) })
	t.Run("AnyImage", func(t *testing.T) { kubeAnyImage(t, k) })
	t.Run("Unschedulable", func(t *testing.T) { kubeUnschedulable(t, k) })
	t.Run("ImageMissing", func(t *testing.T) { kubeImageMissing(t, k) })
	t.Run("DeletedBehindOurBack", func(t *testing.T) { kubeDeletedBehindOurBack(t, k) })
	t.Run("OwnersApartAndRecover", func(t *testing.T) { kubeOwnersApartAndRecover(t, k) })
	t.Run("NetworkPolicy", func(t *testing.T) { kubeNetworkPolicy(t, k) })
	t.Run("TakenMemberStartsAsItsNewSelf", func(t *testing.T) { kubeKeepIdentity(t, k) })
	t.Run("Placement", func(t *testing.T) { kubePlacement(t, k) })
	t.Run("NothingLeft", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pods, err := k.cli.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			t.Errorf("pod left: %s (%s)", p.Name, p.Status.Phase)
		}
		secs, err := k.cli.CoreV1().Secrets(k.ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelManaged + "=true"})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secs.Items {
			t.Errorf("secret left: %s", s.Name)
		}
	})
}

// provision makes an environment with a fresh credential and waits for its
// agent; the environment is destroyed when the test ends.
func (k *kube) provision(t *testing.T, rt *kubernetes.Runtime, spec ports.EnvironmentSpec) ports.Environment {
	t.Helper()
	s, err := secret.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := k.link.Credentials.Put(spec.Name, s); err != nil {
		t.Fatal(err)
	}
	spec.Agent = k.link.Bootstrap
	spec.Agent.ID, spec.Agent.Secret = spec.Name, s
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := rt.Provision(ctx, spec)
	if err != nil {
		t.Fatalf("Provision %s: %v", spec.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := rt.Destroy(ctx, spec.Name); err != nil && !errors.Is(err, ports.ErrEnvNotFound) {
			t.Errorf("Destroy %s: %v", spec.Name, err)
		}
	})
	waitConnected(t, k.link, spec.Name)
	return env
}

func waitConnected(t *testing.T, l *Link, id string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if a, ok := l.Service.Agent(id); ok && a.Status.Working() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("agent %s did not connect within 2m", id)
}

func (k *kube) getPod(t *testing.T, rt *kubernetes.Runtime, name string) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := k.cli.CoreV1().Pods(k.ns).Get(ctx, rt.ObjectName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// kubeHardening checks the pod as the cluster holds it, and what a command
// inside can do.
func kubeHardening(t *testing.T, k *kube) {
	rt := k.runtime(t, nil)
	k.provision(t, rt, ports.EnvironmentSpec{Name: "hard", Resources: ports.Resources{CPUs: 0.25, MemoryMB: 128, DiskGB: 1}})
	p := k.getPod(t, rt, "hard")
	if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
		t.Errorf("service account token mounted: %v", p.Spec.AutomountServiceAccountToken)
	}
	var c corev1.Container
	for _, x := range p.Spec.Containers {
		if x.Name == kubernetes.ContainerName {
			c = x
		}
	}
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container security context %+v", sc)
	}
	for _, e := range c.Env {
		if strings.Contains(strings.ToUpper(e.Name), "SECRET") && e.Name != "AGENT_SECRET_FILE" || e.ValueFrom != nil {
			t.Errorf("environment variable %s carries a secret", e.Name)
		}
	}
	if got := c.Resources.Limits.Memory().Value(); got != 128<<20 {
		t.Errorf("memory limit %d, want %d", got, 128<<20)
	}
	if got := c.Resources.Limits.Cpu().MilliValue(); got != 250 {
		t.Errorf("cpu limit %dm, want 250m", got)
	}
	if got := c.Resources.Limits.StorageEphemeral().Value(); got != 1<<30 {
		t.Errorf("ephemeral-storage limit %d, want 1Gi", got)
	}
	res := portstest.RunScript(t, k.link.Service, "hard", `id -u; id -g
cat /run/agentic-credentials/agent-secret >/dev/null 2>&1 && echo SECRET-READ
ls -ln /run/agentic-credentials/ | grep -c -- '-r--------' 
grep -E '^Cap(Eff|Prm)' /proc/self/status
ls /var/run/secrets/kubernetes.io 2>&1 | head -1
touch /opt/agentic/x 2>/dev/null && echo AGENT-DIR-WRITABLE
echo done`, nil)
	out := res.Output
	if res.Exit != 0 || !strings.Contains(out, "done") {
		t.Fatalf("script: exit %d, %q, %q", res.Exit, out, res.Error)
	}
	lines := strings.Split(out, "\n")
	if len(lines) < 2 || lines[0] != "65534" || lines[1] != "65534" {
		t.Errorf("commands run as %q, want nobody (65534)", lines[:2])
	}
	for _, bad := range []string{"SECRET-READ", "AGENT-DIR-WRITABLE"} {
		if strings.Contains(out, bad) {
			t.Errorf("a command could: %s\n%s", bad, out)
		}
	}
	if !strings.Contains(out, "CapPrm:\t0000000000000000") || !strings.Contains(out, "CapEff:\t0000000000000000") {
		t.Errorf("commands hold capabilities:\n%s", out)
	}
	if strings.Contains(out, "token") {
		t.Errorf("a service-account token is mounted:\n%s", out)
	}
}

// kubeUnschedulable: more CPU than the node fails Provision at once with the
// scheduler's reason, and leaves nothing.
func kubeUnschedulable(t *testing.T, k *kube) {
	rt := k.runtime(t, nil)
	s, _ := secret.New()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := ports.EnvironmentSpec{Name: "huge", Resources: ports.Resources{CPUs: 512}, Agent: k.link.Bootstrap}
	spec.Agent.ID, spec.Agent.Secret = "huge", s
	_, err := rt.Provision(ctx, spec)
	if err == nil || !strings.Contains(err.Error(), "cannot be scheduled") || !strings.Contains(err.Error(), "Insufficient cpu") {
		t.Fatalf("Provision of 512 CPUs: %v; want the scheduler's Insufficient cpu", err)
	}
	if left := k.leftovers(t, "huge"); len(left) > 0 {
		t.Errorf("a failed Provision left %v", left)
	}
}

// kubeImageMissing: an image the node lacks (and may not pull) fails with
// the kubelet's reason, not a hang.
func kubeImageMissing(t *testing.T, k *kube) {
	rt := k.runtime(t, nil)
	s, _ := secret.New()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := ports.EnvironmentSpec{Name: "noimage", Image: "example.invalid/none:1", Agent: k.link.Bootstrap}
	spec.Agent.ID, spec.Agent.Secret = "noimage", s
	_, err := rt.Provision(ctx, spec)
	if err == nil || !strings.Contains(err.Error(), "ErrImageNeverPull") {
		t.Fatalf("Provision of a missing image: %v; want ErrImageNeverPull", err)
	}
	if left := k.leftovers(t, "noimage"); len(left) > 0 {
		t.Errorf("a failed Provision left %v", left)
	}
}

// kubeDeletedBehindOurBack: kubectl delete pod makes the environment failed
// with the reason; Destroy still cleans up.
func kubeDeletedBehindOurBack(t *testing.T, k *kube) {
	rt := k.runtime(t, nil)
	k.provision(t, rt, ports.EnvironmentSpec{Name: "victim"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := k.cluster.Kubectl(ctx, "-n", k.ns, "delete", "pod", rt.ObjectName("victim"), "--wait=true"); err != nil {
		t.Fatal(err)
	}
	env, err := rt.Inspect(ctx, "victim")
	if err != nil || env.State != ports.EnvFailed || !strings.Contains(env.Detail, "deleted outside") {
		t.Fatalf("Inspect after kubectl delete pod: %+v, %v; want failed, deleted outside", env, err)
	}
	if err := rt.Destroy(ctx, "victim"); err != nil {
		t.Fatal(err)
	}
	if left := k.leftovers(t, "victim"); len(left) > 0 {
		t.Errorf("Destroy left %v", left)
	}
}

// kubeOwnersApartAndRecover: another server's adapter in the same namespace
// neither sees nor touches this one's environment, even one of the same
// name; a new adapter of the same owner (a restarted server) finds it.
func kubeOwnersApartAndRecover(t *testing.T, k *kube) {
	rt := k.runtime(t, nil)
	k.provision(t, rt, ports.EnvironmentSpec{Name: "dev"})
	other := k.runtime(t, func(c *kubernetes.Config) { c.Owner = "other" })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if list, err := other.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("another owner's List: %v, %v; want nothing", list, err)
	}
	if _, err := other.Inspect(ctx, "dev"); !errors.Is(err, ports.ErrEnvNotFound) {
		t.Errorf("another owner's Inspect: %v, want ErrEnvNotFound", err)
	}
	if err := other.Destroy(ctx, "dev"); !errors.Is(err, ports.ErrEnvNotFound) {
		t.Errorf("another owner's Destroy: %v, want ErrEnvNotFound", err)
	}
	restarted := k.runtime(t, nil)
	got, err := restarted.Recover(ctx)
	if err != nil || len(got) != 1 || got[0].Name != "dev" || got[0].State != ports.EnvRunning {
		t.Fatalf("Recover by a new adapter: %+v, %v; want dev running", got, err)
	}
	portstest.RunScript(t, k.link.Service, "dev", "true", nil)
}

// kubeNetworkPolicy: where the cluster is declared to enforce policies, a
// closed environment gets one that denies all but the agent port; its
// deletion goes with the environment.
func kubeNetworkPolicy(t *testing.T, k *kube) {
	rt := k.runtime(t, func(c *kubernetes.Config) { c.NetworkPolicy = true })
	if modes := rt.Capabilities().NetworkModes; len(modes) != 3 || modes[0] != ports.NetworkNone {
		t.Fatalf("modes with enforced policies: %v", modes)
	}
	if modes := k.runtime(t, nil).Capabilities().NetworkModes; len(modes) != 1 || modes[0] != ports.NetworkBridge {
		t.Fatalf("modes without enforced policies: %v, want bridge alone", modes)
	}
	k.provision(t, rt, ports.EnvironmentSpec{Name: "closed", Network: ports.NetworkProxy})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pol, err := k.cli.NetworkingV1().NetworkPolicies(k.ns).Get(ctx, rt.ObjectName("closed"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pol.Spec.Ingress) != 0 || len(pol.Spec.Egress) != 1 || len(pol.Spec.Egress[0].To) != 1 ||
		pol.Spec.Egress[0].To[0].IPBlock == nil || pol.Spec.Egress[0].To[0].IPBlock.CIDR != harness.KubernetesGateway+"/32" {
		t.Errorf("policy %+v: want no ingress and egress to the agent port alone", pol.Spec)
	}
	p := k.getPod(t, rt, "closed")
	sel := pol.Spec.PodSelector.MatchLabels
	for key, v := range sel {
		if p.Labels[key] != v {
			t.Errorf("the policy's selector %v does not select the pod (labels %v)", sel, p.Labels)
		}
	}
	if err := rt.Destroy(ctx, "closed"); err != nil {
		t.Fatal(err)
	}
	if left := k.leftovers(t, "closed"); len(left) > 0 {
		t.Errorf("Destroy left %v", left)
	}
}

// kubeKeepIdentity: a pool member handed over (its agent renamed, its old
// credential revoked) and then stopped and started comes back under its new
// identity, since Start makes a new pod from what the Secret keeps.
func kubeKeepIdentity(t *testing.T, k *kube) {
	rt := k.runtime(t, nil)
	k.provision(t, rt, ports.EnvironmentSpec{Name: "member-1"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := secret.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := k.link.Credentials.Put("taken-1", s); err != nil {
		t.Fatal(err)
	}
	if err := k.link.Service.RenameAgent(ctx, "member-1", "taken-1", s); err != nil {
		t.Fatal(err)
	}
	waitConnected(t, k.link, "taken-1")
	if err := k.link.Credentials.Delete("member-1"); err != nil {
		t.Fatal(err)
	}
	if err := rt.KeepIdentity(ctx, "member-1", "taken-1", s); err != nil {
		t.Fatal(err)
	}
	before, _ := k.link.Service.Agent("taken-1")
	if err := rt.Stop(ctx, "member-1"); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, "member-1"); err != nil {
		t.Fatal(err)
	}
	// The new pod's agent: a command it runs now proves it signed in anew.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if a, ok := k.link.Service.Agent("taken-1"); ok && a.Status.Working() && a.ConnectedAt.After(before.ConnectedAt) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the restarted pod's agent did not sign in as taken-1")
		}
		time.Sleep(50 * time.Millisecond)
	}
	res := portstest.RunScript(t, k.link.Service, "taken-1", "echo $AGENT_ID", nil)
	if strings.TrimSpace(res.Output) != "taken-1" {
		t.Fatalf("the restarted agent says it is %q, want taken-1", res.Output)
	}
}

// kubePlacement: a node selector and tolerations reach the pod; a selector
// no node matches fails with the scheduler's reason.
func kubePlacement(t *testing.T, k *kube) {
	rt := k.runtime(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node, err := k.cluster.Kubectl(ctx, "get", "nodes", "-o", "jsonpath={.items[0].metadata.name}")
	if err != nil {
		t.Fatal(err)
	}
	k.provision(t, rt, ports.EnvironmentSpec{Name: "placed", Placement: ports.Placement{
		NodeSelector: map[string]string{"kubernetes.io/hostname": string(node)},
		Tolerations:  []ports.Toleration{{Key: "dedicated", Operator: "Equal", Value: "agents", Effect: "NoSchedule"}},
	}})
	p := k.getPod(t, rt, "placed")
	if p.Spec.NodeSelector["kubernetes.io/hostname"] != string(node) || p.Spec.NodeName != string(node) {
		t.Errorf("pod on %q with selector %v; want it on %s by its selector", p.Spec.NodeName, p.Spec.NodeSelector, node)
	}
	tolerated := false
	for _, tol := range p.Spec.Tolerations {
		tolerated = tolerated || tol.Key == "dedicated" && tol.Value == "agents" && tol.Effect == corev1.TaintEffectNoSchedule
	}
	if !tolerated {
		t.Errorf("tolerations %v lack dedicated=agents:NoSchedule", p.Spec.Tolerations)
	}
	s, _ := secret.New()
	spec := ports.EnvironmentSpec{Name: "nowhere", Agent: k.link.Bootstrap,
		Placement: ports.Placement{NodeSelector: map[string]string{"agentic-sandbox.io/pool": "gpu"}}}
	spec.Agent.ID, spec.Agent.Secret = "nowhere", s
	_, err = rt.Provision(ctx, spec)
	if err == nil || !strings.Contains(err.Error(), "cannot be scheduled") || !strings.Contains(err.Error(), "node affinity/selector") {
		t.Fatalf("Provision with a selector no node matches: %v; want the scheduler's reason", err)
	}
	if left := k.leftovers(t, "nowhere"); len(left) > 0 {
		t.Errorf("a failed Provision left %v", left)
	}
}

// kubeAnyImage: an image that knows nothing of the agent (the test
// cluster's own busybox image) gets it from the init container, read-only;
// the project's default image carries its own and needs none.
func kubeAnyImage(t *testing.T, k *kube) {
	rt := k.runtime(t, nil)
	k.provision(t, rt, ports.EnvironmentSpec{Name: "foreign", Image: harness.KubernetesWorkloadImage})
	p := k.getPod(t, rt, "foreign")
	if len(p.Spec.InitContainers) != 1 || p.Spec.InitContainers[0].Image != k.cfg.AgentImage {
		t.Errorf("init containers %+v; want the agent image's", p.Spec.InitContainers)
	}
	res := portstest.RunScript(t, k.link.Service, "foreign", `ls /usr/local/bin/probe >/dev/null && echo OWN-IMAGE
touch /opt/agentic/x 2>/dev/null && echo AGENT-DIR-WRITABLE
cp /dev/null /opt/agentic/agentic-agent 2>/dev/null && echo AGENT-REPLACED
echo done`, nil)
	if res.Exit != 0 || !strings.Contains(res.Output, "OWN-IMAGE") || !strings.Contains(res.Output, "done") {
		t.Fatalf("script in the foreign image: exit %d, %q %s", res.Exit, res.Output, res.Error)
	}
	for _, bad := range []string{"AGENT-DIR-WRITABLE", "AGENT-REPLACED"} {
		if strings.Contains(res.Output, bad) {
			t.Errorf("a command could: %s", bad)
		}
	}
	k.provision(t, rt, ports.EnvironmentSpec{Name: "native"})
	if p := k.getPod(t, rt, "native"); len(p.Spec.InitContainers) != 0 || p.Spec.Containers[0].Command[0] != kubernetes.ImageAgentPath {
		t.Errorf("the default image's pod: init %d, command %v; want its own agent", len(p.Spec.InitContainers), p.Spec.Containers[0].Command)
	}
}
