package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/kubernetes"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/runtimetest"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/ociimage"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

// deployObjects is what deploy/kubernetes holds, by kind/name.
var deployObjects = []string{
	"Namespace/", "ServiceAccount/agentic-mgmt", "Role/agentic-mgmt", "RoleBinding/agentic-mgmt",
	"PersistentVolumeClaim/agentic-mgmt-data", "Deployment/agentic-mgmt",
	"Service/agentic-mgmt-agent", "Service/agentic-mgmt-api",
}

// renderDeploy renders deploy/kubernetes with kustomize (kubectl's) into
// namespace ns, as an operator would with `namespace:` in an overlay; the
// objects come back as they would be applied.
func renderDeploy(t *testing.T, c *harness.KubernetesCluster, ns string) (string, []*unstructured.Unstructured) {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	overlay := t.TempDir()
	// kustomize takes a base by a relative path only.
	base, err := filepath.Rel(overlay, filepath.Join(root, "deploy", "kubernetes"))
	if err != nil {
		t.Fatal(err)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: " + ns +
		"\nresources:\n  - " + base + "\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	out, err := c.Kubectl(ctx, "kustomize", overlay)
	if err != nil {
		t.Fatalf("the manifests do not build: %v", err)
	}
	var objs []*unstructured.Unstructured
	r := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var u unstructured.Unstructured
		if err := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(doc), 4096).Decode(&u.Object); err != nil {
			t.Fatalf("rendered object %q: %v", doc, err)
		}
		objs = append(objs, &u)
	}
	return string(out), objs
}

// selectObjects is the YAML of objs whose kind is one of kinds.
func selectObjects(t *testing.T, objs []*unstructured.Unstructured, kinds ...string) string {
	t.Helper()
	var b strings.Builder
	for _, o := range objs {
		if slices.Contains(kinds, o.GetKind()) {
			data, err := o.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString("---\n")
			b.Write(data)
			b.WriteString("\n")
		}
	}
	return b.String()
}

// deployRole is deploy/kubernetes/role.yaml.
func deployRole(t *testing.T) rbacv1.Role {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", "kubernetes", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.Role
	if err := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096).Decode(&role); err != nil {
		t.Fatal(err)
	}
	return role
}

// serviceAccountKubeconfig writes a kubeconfig that reaches the cluster as
// ns's ServiceAccount sa, with a token the API server issues for it.
func serviceAccountKubeconfig(t *testing.T, c *harness.KubernetesCluster, ns, sa string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	tok, err := c.Kubectl(ctx, "-n", ns, "create", "token", sa, "--duration=1h")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cur := admin.Contexts[admin.CurrentContext]
	if cur == nil || admin.Clusters[cur.Cluster] == nil {
		t.Fatalf("admin kubeconfig %s: no current context's cluster", c.Kubeconfig)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = admin.Clusters[cur.Cluster]
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: strings.TrimSpace(string(tok))}
	kc.Contexts["sa"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: sa, Namespace: ns}
	kc.CurrentContext = "sa"
	path := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// apiCall is one request to the API server: verb (RBAC's), API group,
// resource, and the answer's status.
type apiCall struct {
	Verb, Group, Resource string
	Status                int
}

// callRecorder records every request a client makes (wrap: its transport).
type callRecorder struct {
	mu    sync.Mutex
	calls []apiCall
}

func (r *callRecorder) wrap(next http.RoundTripper) http.RoundTripper {
	return recordingTransport{r, next}
}

type recordingTransport struct {
	r    *callRecorder
	next http.RoundTripper
}

func (t recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	c := requestCall(req)
	if resp != nil {
		c.Status = resp.StatusCode
	}
	t.r.mu.Lock()
	t.r.calls = append(t.r.calls, c)
	t.r.mu.Unlock()
	return resp, err
}

func (r *callRecorder) recorded() []apiCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// requestCall names a request as RBAC does: /api/v1/namespaces/NS/RES[/NAME]
// or /apis/GROUP/VERSION/namespaces/NS/RES[/NAME], its verb from the method
// (a GET of a collection is list, or watch with ?watch=true).
func requestCall(req *http.Request) apiCall {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	var group string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		group, parts = parts[1], parts[3:]
	default:
		return apiCall{Verb: req.Method, Resource: req.URL.Path}
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	c := apiCall{Group: group}
	if len(parts) > 0 {
		c.Resource = parts[0]
	}
	if len(parts) > 2 {
		c.Resource += "/" + parts[2]
	}
	named := len(parts) > 1
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			c.Verb = "watch"
		case named:
			c.Verb = "get"
		default:
			c.Verb = "list"
		}
	case http.MethodPost:
		c.Verb = "create"
	case http.MethodPut:
		c.Verb = "update"
	case http.MethodPatch:
		c.Verb = "patch"
	case http.MethodDelete:
		c.Verb = "delete"
		if !named {
			c.Verb = "deletecollection"
		}
	default:
		c.Verb = req.Method
	}
	return c
}

// tlsLink is an agent service in the test, served over TLS on every address
// with a certificate for the pods' gateway: what agents in pods dial.
type tlsLink struct {
	*runtimetest.Link
	url string
	ca  []byte
}

func startTLSLink(t *testing.T, host string) *tlsLink {
	t.Helper()
	l := runtimetest.StartLink(t, t.TempDir())
	port, ca := l.ServeTLS(t, []string{host})
	return &tlsLink{Link: l, url: "https://" + net.JoinHostPort(host, strconv.Itoa(port)), ca: ca}
}

// spec is an environment whose agent the link knows.
func (l *tlsLink) spec(t *testing.T, name string) ports.EnvironmentSpec {
	t.Helper()
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	s := ports.EnvironmentSpec{Name: name, Resources: ports.Resources{CPUs: 0.25, MemoryMB: 128}}
	s.Agent.ID, s.Agent.Secret = name, hex.EncodeToString(b)
	if err := l.Credentials.Put(name, s.Agent.Secret); err != nil {
		t.Fatal(err)
	}
	return s
}

func (l *tlsLink) waitAgent(t *testing.T, name string, up bool) {
	t.Helper()
	eventually(t, 3*patience, fmt.Sprintf("agent %s connected=%v", name, up), func() bool {
		info, ok := l.Service.Agent(name)
		return (ok && info.Status.Working()) == up
	})
}

// canI asks the API server whether the ServiceAccount may do verb on
// what (kubectl auth can-i): "yes" or "no".
func canI(t *testing.T, c *harness.KubernetesCluster, sa string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	out, err := c.Kubectl(ctx, append([]string{"auth", "can-i", "--as=" + sa}, args...)...)
	answer := strings.TrimSpace(string(out))
	if answer != "yes" && answer != "no" {
		t.Fatalf("kubectl auth can-i %q: %q, %v", args, answer, err)
	}
	return answer
}

// deploy/kubernetes builds with kustomize and the API server accepts every
// object of it (server-side dry run); its ServiceAccount, with a token of its
// own, runs the kubernetes runtime through an environment's whole life —
// provision (with a NetworkPolicy), inspect, list, a command, stop, start,
// destroy, and a provision that fails on a missing image — using every right
// its Role grants and no other (each request recorded, none refused), while
// it may not read another namespace's Secrets, make namespaces or list nodes.
// The namespace carries the manifest's Pod Security labels (baseline
// enforced), which the environment's pod is admitted under.
func TestDeployKubernetesManifestsAndTheirRole(t *testing.T) {
	c := harness.Kubernetes(t)
	ns := c.Namespace(t, t.Name())
	sa := "system:serviceaccount:" + ns + ":agentic-mgmt"
	ctx, cancel := context.WithTimeout(context.Background(), 10*patience)
	defer cancel()

	rendered, objs := renderDeploy(t, c, ns)
	var got []string
	for _, o := range objs {
		id := o.GetKind() + "/" + o.GetName()
		if o.GetKind() == "Namespace" {
			id = "Namespace/"
			if o.GetName() != ns {
				t.Errorf("the Namespace is %q after `namespace: %s`", o.GetName(), ns)
			}
		} else if o.GetNamespace() != ns {
			t.Errorf("%s is in namespace %q, not %q", id, o.GetNamespace(), ns)
		}
		got = append(got, id)
	}
	if !sameSet(got, deployObjects) {
		t.Fatalf("deploy/kubernetes renders %q, want %q", got, deployObjects)
	}

	t.Run("ServerDryRun", func(t *testing.T) {
		out, err := c.KubectlIn(ctx, rendered, "apply", "--dry-run=server", "-f", "-")
		if err != nil {
			t.Fatalf("the API server refuses deploy/kubernetes: %v\n%s", err, out)
		}
		// One line per object: kind[.group]/name created|configured (server dry run).
		for _, id := range deployObjects {
			kind, name, _ := strings.Cut(id, "/")
			if name == "" {
				name = ns
			}
			line := regexp.MustCompile(`(?m)^` + strings.ToLower(kind) + `(\.[a-z0-9.]+)?/` + regexp.QuoteMeta(name) + ` (created|configured|unchanged) \(server dry run\)$`)
			if !line.Match(out) {
				t.Errorf("the dry run does not accept %s/%s:\n%s", kind, name, out)
			}
		}
	})

	// The namespace's labels (Pod Security baseline), the ServiceAccount,
	// Role and RoleBinding, for real.
	if out, err := c.KubectlIn(ctx, selectObjects(t, objs, "Namespace", "ServiceAccount", "Role", "RoleBinding"), "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the RBAC objects: %v\n%s", err, out)
	}

	t.Run("CannotReachBeyondItsNamespace", func(t *testing.T) {
		for _, q := range [][]string{
			{"get", "secrets", "-n", "kube-system"},
			{"list", "secrets", "-n", "default"},
			{"create", "pods", "-n", "default"},
			{"create", "namespaces"},
			{"list", "nodes"},
			{"create", "pods", "--subresource=exec", "-n", ns},
			{"get", "pods", "--subresource=log", "-n", ns},
			{"update", "pods", "-n", ns},
			{"create", "deployments.apps", "-n", ns},
			{"update", "secrets", "-n", ns},
			{"create", "rolebindings.rbac.authorization.k8s.io", "-n", ns},
		} {
			if a := canI(t, c, sa, q...); a != "no" {
				t.Errorf("agentic-mgmt can %q: %s", q, a)
			}
		}
		for _, q := range [][]string{{"create", "pods", "-n", ns}, {"patch", "secrets", "-n", ns}, {"list", "events", "-n", ns}} {
			if a := canI(t, c, sa, q...); a != "yes" {
				t.Errorf("agentic-mgmt cannot %q: %s", q, a)
			}
		}
	})

	t.Run("RunsTheRuntimeWithExactlyItsRole", func(t *testing.T) {
		imgCtx, imgCancel := context.WithTimeout(ctx, 5*time.Minute)
		agentImage, workloadImage, err := c.ImportProjectImages(imgCtx, bins.Agent, t.TempDir())
		imgCancel()
		if err != nil {
			t.Fatal(err)
		}
		rc, err := clientcmd.BuildConfigFromFlags("", serviceAccountKubeconfig(t, c, ns, "agentic-mgmt"))
		if err != nil {
			t.Fatal(err)
		}
		rec := &callRecorder{}
		rc.WrapTransport = rec.wrap
		link := startTLSLink(t, harness.KubernetesGateway)
		rt, err := kubernetes.New(kubernetes.Config{
			REST: rc, Namespace: ns, Owner: "deploy",
			AgentImage: agentImage, DefaultImage: workloadImage, PullPolicy: corev1.PullNever,
			ServerURL: link.url, CA: link.ca, NetworkPolicy: true,
			StartTimeout: 3 * time.Minute, StopGrace: 2 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.Ping(ctx); err != nil {
			t.Fatalf("ping as agentic-mgmt: %v", err)
		}

		const name = "deployed-1"
		spec := link.spec(t, name)
		spec.Network = ports.NetworkNone // a NetworkPolicy too
		if _, err := rt.Provision(ctx, spec); err != nil {
			t.Fatalf("provision as agentic-mgmt: %v", err)
		}
		link.waitAgent(t, name, true)
		if r := portstest.RunScript(t, link.Service, name, "echo in-$AGENT_ID", nil); r.Exit != 0 || !strings.Contains(r.Output, "in-"+name) {
			t.Fatalf("command in the pod: exit %d (%s), output %q", r.Exit, r.Error, r.Output)
		}
		if env, err := rt.Inspect(ctx, name); err != nil || env.State != ports.EnvRunning {
			t.Fatalf("inspect: %+v, %v; want running", env, err)
		}
		if list, err := rt.List(ctx); err != nil || len(list) != 1 || list[0].Name != name {
			t.Fatalf("list: %+v, %v; want %s alone", list, err, name)
		}
		if err := rt.Stop(ctx, name); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if env, err := rt.Inspect(ctx, name); err != nil || env.State != ports.EnvStopped {
			t.Fatalf("inspect after stop: %+v, %v; want stopped", env, err)
		}
		link.waitAgent(t, name, false)
		if err := rt.Start(ctx, name); err != nil {
			t.Fatalf("start: %v", err)
		}
		link.waitAgent(t, name, true)
		if err := rt.Destroy(ctx, name); err != nil {
			t.Fatalf("destroy: %v", err)
		}
		// A pod that cannot start: its events say why.
		bad := link.spec(t, "deployed-2")
		bad.Image = "localhost/agentic-test/not-there:1"
		if _, err := rt.Provision(ctx, bad); err == nil || !strings.Contains(err.Error(), "ErrImageNeverPull") {
			t.Fatalf("provision of a missing image: %v; want ErrImageNeverPull", err)
		}
		left, err := c.Kubectl(ctx, "-n", ns, "get", "pods,secrets,networkpolicies", "-l", kubernetes.LabelManaged+"=true", "-o", "name")
		if err != nil || len(bytes.TrimSpace(left)) != 0 {
			t.Fatalf("left in %s: %q, %v", ns, left, err)
		}

		calls := rec.recorded()
		used := map[string]bool{}
		for _, call := range calls {
			if call.Status == http.StatusForbidden || call.Status == http.StatusUnauthorized {
				t.Errorf("refused: %s %s/%s (%d)", call.Verb, call.Group, call.Resource, call.Status)
			}
			used[call.Verb+" "+call.Group+"/"+call.Resource] = true
		}
		granted := map[string]bool{}
		for _, rule := range deployRole(t).Rules {
			for _, g := range rule.APIGroups {
				for _, r := range rule.Resources {
					for _, v := range rule.Verbs {
						granted[v+" "+g+"/"+r] = true
					}
				}
			}
		}
		t.Logf("%d requests as agentic-mgmt; used %v", len(calls), keys(used))
		for k := range used {
			if !granted[k] {
				t.Errorf("the runtime needs %q, which role.yaml does not grant", k)
			}
		}
		for k := range granted {
			if !used[k] {
				t.Errorf("role.yaml grants %q, which the runtime never used", k)
			}
		}
	})
}

func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	sort.Strings(x)
	sort.Strings(y)
	return slices.Equal(x, y)
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// deploy/kubernetes as it is, run in the test cluster: the server image
// `make agent-image` builds (from the binary under test), the Deployment
// with its ServiceAccount's in-cluster token and Role, the PVC as its data
// dir, read-only root as a non-root user, Ready by /readyz once the
// runtime answers; then an environment made, used, stopped, started and
// deleted through its REST API, the pod's agent dialling the server pod's
// agent port over TLS with the CA the server made; the server's pod meets
// Pod Security "restricted", the environment's "baseline". Only what this cluster
// lacks is changed: it has no kube-proxy or DNS, so the API server is
// named by address (KUBERNETES_SERVICE_HOST) and agents dial the server
// pod's IP rather than the agent Service's name; and no volume
// provisioner, so a hostPath PersistentVolume is made for the claim.
func TestDeployKubernetesRunsTheServerInTheCluster(t *testing.T) {
	c := harness.Kubernetes(t)
	ns := c.Namespace(t, t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 10*patience)
	defer cancel()
	_, objs := renderDeploy(t, c, ns)

	images := t.TempDir()
	// Tagged by the agent under test (the cluster is shared by test runs
	// of other trees): the Deployment is pointed at these, as an operator
	// points it at images pushed to a registry.
	agentImage, workloadImage, err := c.ImportProjectImages(ctx, bins.Agent, images)
	if err != nil {
		t.Fatal(err)
	}
	server, err := ociimage.BuildServer(images, bins.Mgmt, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(ctx, server.Path); err != nil {
		t.Fatal(err)
	}

	data := t.TempDir()
	if err := os.Chown(data, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	pv := fmt.Sprintf(`{"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": %q},
"spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Retain",
"storageClassName": "", "hostPath": {"path": %q, "type": "Directory"}, "claimRef": {"namespace": %q, "name": "agentic-mgmt-data"}}}`, ns, data, ns)
	if _, err := c.KubectlIn(ctx, pv, "create", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = c.Kubectl(ctx, "delete", "persistentvolume", ns, "--wait=false")
	})
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	if _, err := c.Kubectl(ctx, "-n", ns, "create", "secret", "generic", "agentic-operator-token", "--from-literal=token="+token); err != nil {
		t.Fatal(err)
	}

	admin, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	apiURL, err := url.Parse(admin.Host)
	if err != nil {
		t.Fatal(err)
	}
	var manifest strings.Builder
	manifest.WriteString(selectObjects(t, objs, "Namespace", "ServiceAccount", "Role", "RoleBinding", "PersistentVolumeClaim", "Service"))
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			t.Fatal(err)
		}
		ctr := &d.Spec.Template.Spec.Containers[0]
		for i, e := range ctr.Env {
			if e.Name == "AGENTIC_ADVERTISE_HOST" {
				ctr.Env[i] = corev1.EnvVar{Name: e.Name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}
			}
		}
		ctr.Env = append(ctr.Env,
			corev1.EnvVar{Name: "AGENTIC_K8S_AGENT_IMAGE", Value: agentImage},
			corev1.EnvVar{Name: "AGENTIC_K8S_IMAGE", Value: workloadImage},
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: harness.KubernetesGateway},
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: apiURL.Port()})
		j, err := json.Marshal(&d)
		if err != nil {
			t.Fatal(err)
		}
		manifest.WriteString("---\n")
		manifest.Write(j)
		manifest.WriteString("\n")
	}
	if out, err := c.KubectlIn(ctx, manifest.String(), "apply", "-f", "-"); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	started := time.Now()
	if out, err := c.Kubectl(ctx, "-n", ns, "rollout", "status", "deployment/agentic-mgmt", "--timeout="+(3*patience).String()); err != nil {
		desc, _ := c.Kubectl(context.Background(), "-n", ns, "describe", "pods")
		logs, _ := c.Kubectl(context.Background(), "-n", ns, "logs", "deployment/agentic-mgmt")
		t.Fatalf("agentic-mgmt not rolled out: %v %s\n%s\nlogs:\n%s", err, out, desc, logs)
	}
	t.Logf("agentic-mgmt Ready (its /readyz) %v after the apply", time.Since(started).Round(10*time.Millisecond))
	t.Cleanup(func() {
		logs, _ := c.Kubectl(context.Background(), "-n", ns, "logs", "deployment/agentic-mgmt")
		t.Logf("agentic-mgmt log:\n%s", logs)
	})
	ip, err := c.Kubectl(ctx, "-n", ns, "get", "pods", "-l", "app.kubernetes.io/name=agentic-mgmt", "-o", "jsonpath={.items[0].status.podIP}")
	if err != nil || net.ParseIP(string(ip)) == nil {
		t.Fatalf("the server pod's IP: %q, %v", ip, err)
	}
	rest := "http://" + net.JoinHostPort(string(ip), "8122")

	resp, err := http.Get(rest + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	ready, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(ready), "runtime_kubernetes") {
		t.Fatalf("/readyz: %d %s", resp.StatusCode, ready)
	}
	// The server as the Deployment runs it: not root, and its files in the volume.
	user, err := c.Kubectl(ctx, "-n", ns, "get", "pods", "-l", "app.kubernetes.io/name=agentic-mgmt", "-o",
		"jsonpath={.items[0].spec.securityContext.runAsUser} {.items[0].spec.containers[0].securityContext.readOnlyRootFilesystem}")
	if err != nil || string(user) != "65532 true" {
		t.Fatalf("server pod runs as %q (%v): want 65532 with a read-only root", user, err)
	}
	if fi, err := os.Stat(filepath.Join(data, "identity")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 65532 {
		t.Fatalf("the data dir's identity: %v (want written by 65532 into the volume)", err)
	}

	const name = "in-cluster-1"
	out, errOut, code := ctl(t, rest, token, "env", "create", "--runtime", "kubernetes", name)
	if code != 0 || !strings.Contains(out, name+": ready") {
		t.Fatalf("create: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	cli, err := restapi.NewClientWithResponses(rest, restapi.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	exe, err := cli.ExecCommandWithResponse(ctx, name, restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "echo from-$AGENT_RUNTIME-$(id -u)"})})
	if err != nil || exe.JSON200 == nil || !strings.Contains(exe.JSON200.Stdout, "from-container-65534") {
		t.Fatalf("exec in the pod: %v %s", err, exe.Body)
	}
	for _, step := range []struct{ verb, state string }{{"stop", "stopped"}, {"start", "ready"}} {
		if out, errOut, code := ctl(t, rest, token, "env", step.verb, name); code != 0 {
			t.Fatalf("%s: exit %d %q %q", step.verb, code, out, errOut)
		}
	}
	eventually(t, 3*patience, "the agent back after start", func() bool {
		exe, err := cli.ExecCommandWithResponse(ctx, name, restapi.ExecRequest{Command: "true"})
		return err == nil && exe.JSON200 != nil && exe.JSON200.ExitCode == 0
	})
	// Pod Security: the namespace enforces baseline (the environment's pod
	// was admitted); "restricted" would refuse the environment's pod (its
	// agent is root) but not the server's.
	restricted := func() string {
		out, err := exec.CommandContext(ctx, c.KubectlPath, "--kubeconfig="+c.Kubeconfig, "label", "--dry-run=server", "--overwrite",
			"namespace", ns, "pod-security.kubernetes.io/enforce=restricted").CombinedOutput()
		if err != nil {
			t.Fatalf("label --dry-run=server: %v\n%s", err, out)
		}
		return string(out)
	}
	if w := restricted(); !strings.Contains(w, "Warning") || !strings.Contains(w, "agentic-in-cluster-1-") || strings.Contains(w, "agentic-mgmt-") {
		t.Fatalf("restricted, with the environment running: %q; want a warning for its pod, none for the server's", w)
	}
	if out, errOut, code := ctl(t, rest, token, "env", "delete", name); code != 0 {
		t.Fatalf("delete: exit %d %q %q", code, out, errOut)
	}
	eventually(t, 3*patience, "nothing left of the environment", func() bool {
		left, err := c.Kubectl(ctx, "-n", ns, "get", "pods,secrets,networkpolicies", "-l", kubernetes.LabelManaged+"=true", "-o", "name")
		return err == nil && len(bytes.TrimSpace(left)) == 0
	})
	if w := restricted(); strings.Contains(w, "Warning") {
		t.Fatalf("the server's pod does not meet Pod Security restricted: %s", w)
	}
	// Nothing went wrong on the way (no agent binary is needed beside it:
	// pods take the agent from the agent image).
	logs, err := c.Kubectl(ctx, "-n", ns, "logs", "deployment/agentic-mgmt")
	if err != nil || bytes.Contains(logs, []byte("level=ERROR")) {
		t.Fatalf("the server logged errors (%v)", err)
	}
}
