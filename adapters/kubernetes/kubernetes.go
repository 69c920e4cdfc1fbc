// Package kubernetes is the "kubernetes" runtime: every environment is one
// pod on a Kubernetes cluster, placed by its scheduler.
//
// Any image works unchanged: an init container of the agent image copies the
// static agentic-agent into an emptyDir volume (`agentic-agent install`),
// which the environment's container mounts read-only and runs as its
// entrypoint. Without an image the pod runs the project's own workload image
// (busybox; `make agent-image` builds both as archives, no registry needed).
//
// Credentials: the agent's secret and the CA of the server's agent port are
// one Secret per environment, mounted read-only with mode 0400 (root's):
// never an environment variable. No service-account token is mounted. The
// agent dials the server's agent port over TLS (Config.ServerURL), as remote
// agents do.
//
// Hardening like docker's: all capabilities dropped but setuid, setgid and
// kill, which the agent (uid 0 in the container) needs to run and signal its
// commands as nobody (65534, HOME=/tmp), who get none; no privilege
// escalation; seccomp RuntimeDefault; CPU and memory requests equal to their
// limits and ephemeral storage from the spec. Kubernetes has no per-pod pids
// limit (the kubelet's podPidsLimit is per node), so pids is not declared.
//
// The Secret is the environment's anchor: it carries the owner labels, the
// environment's name and the pod it runs (an annotation), and owns the pod
// and the NetworkPolicy (garbage collection removes them with it). Stop
// deletes the pod and marks the Secret stopped; Start makes the pod again. A
// pod gone without that mark was deleted or evicted behind our back: the
// environment is failed, with the reason.
//
// Ownership: objects carry agentic-sandbox.io/managed=true and
// agentic-sandbox.io/owner=<Config.Owner>; their names hash the owner with the
// environment's name, so two servers sharing a namespace never see, adopt or
// touch each other's environments.
package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// RuntimeName is this runtime's catalog name, Capabilities().Runtime and Environment.Runtime.
const RuntimeName = "kubernetes"

// Labels and annotations on everything the adapter makes.
const (
	LabelManaged = "agentic-sandbox.io/managed"
	LabelOwner   = "agentic-sandbox.io/owner"
	// LabelEnvID is a hash of the environment's name (names may hold
	// characters a label value may not): what a NetworkPolicy selects.
	LabelEnvID = "agentic-sandbox.io/env-id"
	// AnnotationEnv is the environment's name.
	AnnotationEnv = "agentic-sandbox.io/env"
	// AnnotationPod, on the Secret, is the pod the environment runs (JSON).
	AnnotationPod = "agentic-sandbox.io/pod"
	// AnnotationStopped, on the Secret, says Stop took the pod away.
	AnnotationStopped = "agentic-sandbox.io/stopped"
	// AnnotationNetwork is the network mode asked for.
	AnnotationNetwork = "agentic-sandbox.io/network"
	// LabelUserPrefix prefixes the spec's own labels (as annotations:
	// their values need not be label values).
	LabelUserPrefix = "label.agentic-sandbox.io/"
	// AnnotationPrefixedLabels holds the spec's labels whose keys have a
	// prefix ("example.com/team"), as a JSON object: an annotation's name
	// may hold one "/" only.
	AnnotationPrefixedLabels = "agentic-sandbox.io/prefixed-labels"
)

// labelAnnotations are the annotations that keep labels.
func labelAnnotations(labels map[string]string) map[string]string {
	out := map[string]string{}
	prefixed := map[string]string{}
	for k, v := range labels {
		if strings.Contains(k, "/") {
			prefixed[k] = v
			continue
		}
		out[LabelUserPrefix+k] = v
	}
	if len(prefixed) > 0 {
		if b, err := json.Marshal(prefixed); err == nil {
			out[AnnotationPrefixedLabels] = string(b)
		}
	}
	return out
}

// annotatedLabels are the labels annotations keep (nil: none).
func annotatedLabels(ann map[string]string) map[string]string {
	var out map[string]string
	put := func(k, v string) {
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	for k, v := range ann {
		if uk, ok := strings.CutPrefix(k, LabelUserPrefix); ok {
			put(uk, v)
		}
	}
	var prefixed map[string]string
	if json.Unmarshal([]byte(ann[AnnotationPrefixedLabels]), &prefixed) == nil {
		for k, v := range prefixed {
			put(k, v)
		}
	}
	return out
}

// Paths inside the environment's container.
const (
	AgentDir   = "/opt/agentic"
	AgentPath  = AgentDir + "/agentic-agent"
	CredsDir   = "/run/agentic-credentials" //nolint:gosec // a path, not a credential
	SecretPath = CredsDir + "/agent-secret" //nolint:gosec // a path, not a credential
	CAPath     = CredsDir + "/ca.crt"
	// ImageAgentPath is the agent in the agent image (internal/ociimage).
	ImageAgentPath = "/agentic/agentic-agent"
	// ContainerName is the environment's container in its pod.
	ContainerName = "environment"
	initName      = "agentic-agent-install"
)

// Secret keys.
const (
	keySecret = "agent-secret" //nolint:gosec // a key's name, not a credential
	keyCA     = "ca.crt"
	// keyIdentity is the identity a pool take gave the agent (KeepIdentity).
	keyIdentity = "identity"
)

const (
	defaultOwner     = "default"
	defaultNamespace = "agentic-sandbox"
	nobody           = int64(65534)
)

var ownerRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,30}$`)

// Config says which cluster to use and how environments are made.
type Config struct {
	// REST, when set, reaches the cluster; otherwise Kubeconfig (a file),
	// else $KUBECONFIG, else the in-cluster config of a pod.
	REST       *rest.Config
	Kubeconfig string
	// Namespace holds every object the adapter makes (default agentic-sandbox);
	// it must exist.
	Namespace string
	// Owner tells this server's objects from another's ([a-z0-9-], default "default").
	Owner string
	// AgentImage holds the static agent at /agentic/agentic-agent; DefaultImage
	// runs when a spec names none. Both required.
	AgentImage, DefaultImage string
	// DefaultImageHasAgent: DefaultImage carries the agent at
	// ImageAgentPath (the project's workload image does), so its pods need
	// no init container: they start as fast as the image alone.
	DefaultImageHasAgent bool
	// PullPolicy for both images ("" is IfNotPresent).
	PullPolicy corev1.PullPolicy
	// ServerURL is the agent port as pods reach it (https://host:port).
	ServerURL string
	// CA is the PEM of the CA the agent trusts for ServerURL; empty trusts
	// the image's system roots.
	CA []byte
	// RuntimeClasses maps a tier (ports.TierGVisor) to the RuntimeClass
	// that runs it; only these tiers are offered.
	RuntimeClasses map[string]string
	// NetworkPolicy declares that the cluster enforces NetworkPolicies:
	// only then are the closed modes (none, proxy) offered, each made of a
	// policy denying all but the agent port.
	NetworkPolicy bool
	// Defaults fill the zero fields of a spec's Resources.
	Defaults ports.Resources
	// StartTimeout bounds Provision and Start waiting for the pod to run
	// (default 5 minutes).
	StartTimeout time.Duration
	// StopGrace is the pod's termination grace period (default 10 s).
	StopGrace time.Duration
}

// Runtime is the Kubernetes adapter; safe for concurrent use.
type Runtime struct {
	cfg     Config
	cs      k8s.Interface
	server  *url.URL
	serverH string // the host part of ServerURL
}

var (
	_ ports.Runtime        = (*Runtime)(nil)
	_ ports.IdentityKeeper = (*Runtime)(nil)
)

// RESTConfig is the client configuration Config selects: REST, Kubeconfig,
// $KUBECONFIG (through the loading rules) or in-cluster.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		if in, ierr := rest.InClusterConfig(); ierr == nil {
			return in, nil
		}
		return nil, err
	}
	return cfg, nil
}

// New makes the adapter; it does not contact the cluster (see Ping).
func New(cfg Config) (*Runtime, error) {
	if cfg.Owner == "" {
		cfg.Owner = defaultOwner
	}
	if !ownerRE.MatchString(cfg.Owner) {
		return nil, fmt.Errorf("kubernetes: owner %q: want [a-z0-9-], at most 31 characters", cfg.Owner)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = defaultNamespace
	}
	if cfg.AgentImage == "" || cfg.DefaultImage == "" {
		return nil, errors.New("kubernetes: the agent image and the default image are required")
	}
	if cfg.PullPolicy == "" {
		cfg.PullPolicy = corev1.PullIfNotPresent
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 5 * time.Minute
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 10 * time.Second
	}
	u, err := url.Parse(cfg.ServerURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" {
		return nil, fmt.Errorf("kubernetes: server URL %q: want https://host:port, as pods reach the agent port", cfg.ServerURL)
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), map[string]string{"https": "443", "http": "80"}[u.Scheme])
	}
	rc := cfg.REST
	if rc == nil {
		if rc, err = RESTConfig(cfg.Kubeconfig); err != nil {
			return nil, fmt.Errorf("kubernetes: %w: %w", ports.ErrRuntimeUnavailable, err)
		}
	}
	rc = rest.CopyConfig(rc)
	if rc.Timeout == 0 {
		rc.Timeout = 30 * time.Second
	}
	rc.UserAgent = "agentic-mgmt"
	// client-go's default, 5 requests/s, makes a burst of 50 creates (a
	// Secret and a pod each) take 20 s before the cluster sees them.
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 100, 200
	}
	cs, err := k8s.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &Runtime{cfg: cfg, cs: cs, server: u, serverH: u.Hostname()}, nil
}

// Namespace is where the adapter's objects live.
func (r *Runtime) Namespace() string { return r.cfg.Namespace }

// Capabilities implements ports.Runtime.
func (r *Runtime) Capabilities() ports.RuntimeCapabilities {
	modes := []ports.NetworkMode{ports.NetworkBridge}
	if r.cfg.NetworkPolicy {
		modes = []ports.NetworkMode{ports.NetworkNone, ports.NetworkProxy, ports.NetworkBridge}
	}
	tiers := make([]string, 0, len(r.cfg.RuntimeClasses))
	for t := range r.cfg.RuntimeClasses {
		tiers = append(tiers, t)
	}
	sort.Strings(tiers)
	return ports.RuntimeCapabilities{
		Runtime:      RuntimeName,
		Isolation:    ports.KindContainer,
		NetworkModes: modes,
		Limits:       []ports.Limit{ports.LimitCPUs, ports.LimitMemoryMB, ports.LimitDiskGB},
		ReadOnlyRoot: true,
		Images:       true,
		Profiles:     []string{ProfileDefault, ProfileRoot},
		Tiers:        tiers,
		Placement:    true,
	}
}

// Profiles: who the agent's commands run as.
const (
	ProfileDefault = "default"
	ProfileRoot    = "root"
)

// Ping implements ports.Runtime: the namespace's Secrets can be listed.
func (r *Runtime) Ping(ctx context.Context) error {
	_, err := r.cs.CoreV1().Secrets(r.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: r.ownerSelector(), Limit: 1})
	if err != nil {
		return fmt.Errorf("kubernetes: %w: %w", ports.ErrRuntimeUnavailable, err)
	}
	return nil
}

func (r *Runtime) ownerSelector() string {
	return LabelManaged + "=true," + LabelOwner + "=" + r.cfg.Owner
}

// ObjectName is the name of an environment's pod, Secret and NetworkPolicy:
// its name made a DNS label, and a hash of the owner and the exact name.
func (r *Runtime) ObjectName(name string) string {
	base := strings.Trim(dnsUnsafe.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if len(base) > 40 {
		base = strings.Trim(base[:40], "-")
	}
	if base == "" {
		base = "env"
	}
	return "agentic-" + base + "-" + r.envID(name)[:10]
}

var dnsUnsafe = regexp.MustCompile(`[^a-z0-9-]+`)

// envID is a hash of owner and name, a valid label value.
func (r *Runtime) envID(name string) string {
	sum := sha256.Sum256([]byte(r.cfg.Owner + "\x00" + name))
	return hex.EncodeToString(sum[:16])
}

func (r *Runtime) labels(name string) map[string]string {
	return map[string]string{LabelManaged: "true", LabelOwner: r.cfg.Owner, LabelEnvID: r.envID(name)}
}

// ours reports whether an object is this server's environment name.
func (r *Runtime) ours(m metav1.Object, name string) bool {
	l := m.GetLabels()
	return l[LabelManaged] == "true" && l[LabelOwner] == r.cfg.Owner && m.GetAnnotations()[AnnotationEnv] == name
}

// apiErr wraps an API error, marking an unreachable cluster.
func apiErr(op string, err error) error {
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("kubernetes %s: %w: %w", op, ports.ErrRuntimeUnavailable, err)
	}
	return fmt.Errorf("kubernetes %s: %w", op, err)
}

// anchor is this server's Secret for name, or ErrEnvNotFound.
func (r *Runtime) anchor(ctx context.Context, name string) (*corev1.Secret, error) {
	s, err := r.cs.CoreV1().Secrets(r.cfg.Namespace).Get(ctx, r.ObjectName(name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && !r.ours(s, name) {
		return nil, fmt.Errorf("%w: %s", ports.ErrEnvNotFound, name)
	}
	if err != nil {
		return nil, apiErr("get secret", err)
	}
	return s, nil
}

// pod is the environment's pod, nil when there is none.
func (r *Runtime) pod(ctx context.Context, name string) (*corev1.Pod, error) {
	p, err := r.cs.CoreV1().Pods(r.cfg.Namespace).Get(ctx, r.ObjectName(name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && !r.ours(p, name) {
		return nil, nil
	}
	if err != nil {
		return nil, apiErr("get pod", err)
	}
	return p, nil
}

// Provision implements ports.Runtime: Secret, NetworkPolicy, pod, and a
// wait for the pod to run its agent.
func (r *Runtime) Provision(ctx context.Context, spec ports.EnvironmentSpec) (ports.Environment, error) {
	if err := r.Capabilities().CheckSpec(spec); err != nil {
		return ports.Environment{}, err
	}
	progress := func(step string) {
		if spec.Progress != nil {
			spec.Progress(step)
		}
	}
	network := spec.Network
	if network == "" {
		network = r.Capabilities().NetworkModes[0]
	}
	pod := r.podFor(spec, network)
	podJSON, err := json.Marshal(pod)
	if err != nil {
		return ports.Environment{}, err
	}
	name := r.ObjectName(spec.Name)
	ann := map[string]string{AnnotationEnv: spec.Name, AnnotationPod: string(podJSON), AnnotationNetwork: string(network)}
	for k, v := range labelAnnotations(spec.Labels) {
		ann[k] = v
	}
	data := map[string][]byte{keySecret: []byte(spec.Agent.Secret + "\n")}
	if len(r.cfg.CA) > 0 {
		data[keyCA] = r.cfg.CA
	}
	immutable := false
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.cfg.Namespace, Labels: r.labels(spec.Name), Annotations: ann},
		Type:       corev1.SecretTypeOpaque, Data: data, Immutable: &immutable,
	}
	progress("create")
	sec, err = r.cs.CoreV1().Secrets(r.cfg.Namespace).Create(ctx, sec, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return ports.Environment{}, fmt.Errorf("%w: %s (secret %s exists)", ports.ErrEnvExists, spec.Name, name)
	}
	if err != nil {
		return ports.Environment{}, r.createErr("secret", err)
	}
	done := false
	defer func() {
		if !done {
			r.cleanup(spec.Name)
		}
	}()
	if r.cfg.NetworkPolicy && network != ports.NetworkBridge {
		if _, err := r.cs.NetworkingV1().NetworkPolicies(r.cfg.Namespace).Create(ctx, r.policyFor(spec.Name, sec), metav1.CreateOptions{}); err != nil {
			return ports.Environment{}, r.createErr("network policy", err)
		}
	}
	p, err := r.startPod(ctx, sec, spec.Name, progress, spec.AgentConnected)
	if err != nil {
		return ports.Environment{}, err
	}
	done = true
	return r.toEnv(sec, p), nil
}

// createErr maps a create's error: the API refusing the object is the
// spec's fault, anything else the cluster's.
func (r *Runtime) createErr(what string, err error) error {
	if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		return fmt.Errorf("%w: %s: %w", ports.ErrInvalidSpec, what, err)
	}
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: creating the %s: %w (does namespace %s exist?)", what, err, r.cfg.Namespace)
	}
	return apiErr("create "+what, err)
}

// cleanup removes what a failed Provision made, on a context of its own.
func (r *Runtime) cleanup(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = r.remove(ctx, name)
}

// startPod makes the pod the Secret describes and waits until it runs.
func (r *Runtime) startPod(ctx context.Context, sec *corev1.Secret, name string, progress func(string), connected <-chan struct{}) (*corev1.Pod, error) {
	var pod corev1.Pod
	if err := json.Unmarshal([]byte(sec.Annotations[AnnotationPod]), &pod); err != nil {
		return nil, fmt.Errorf("kubernetes: the pod kept with %s: %w", name, err)
	}
	ctrl := true
	pod.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Secret", Name: sec.Name, UID: sec.UID, Controller: &ctrl,
	}}
	created, err := r.cs.CoreV1().Pods(r.cfg.Namespace).Create(ctx, &pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("%w: %s (pod %s exists)", ports.ErrEnvExists, name, pod.Name)
	}
	if err != nil {
		return nil, r.createErr("pod", err)
	}
	return r.waitRunning(ctx, created, progress, connected)
}

// waitRunning follows a new pod until its environment container runs,
// reporting each step, and fails at once, with the cluster's reason and the
// pod's warnings, when the pod cannot run (unschedulable, image not pulled,
// init failed). An agent registered (connected closed) ends the wait too:
// the container runs, and the kubelet reports so only at its next relist,
// up to a second later.
func (r *Runtime) waitRunning(ctx context.Context, p *corev1.Pod, progress func(string), connected <-chan struct{}) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StartTimeout)
	defer cancel()
	pods := r.cs.CoreV1().Pods(r.cfg.Namespace)
	said := map[string]bool{}
	say := func(step string) {
		if !said[step] {
			said[step] = true
			progress(step)
		}
	}
	rv := p.ResourceVersion
	for {
		if ok, err := r.podStep(p, say); ok || err != nil {
			if err != nil {
				err = fmt.Errorf("%w%s", err, r.warnings(p.Name))
			}
			return p, err
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", p.Name).String(), ResourceVersion: rv})
		if err != nil {
			if ctx.Err() != nil {
				return p, r.startTimeout(p)
			}
			return p, apiErr("watch pod", err)
		}
		for open := true; open; {
			var ev watch.Event
			select {
			case <-connected:
				w.Stop()
				say("scheduled")
				say("image_pulled")
				say("started")
				return p, nil
			case ev, open = <-w.ResultChan():
			}
			if !open {
				break
			}
			switch ev.Type {
			case watch.Deleted:
				w.Stop()
				return p, fmt.Errorf("kubernetes: pod %s was deleted while starting%s", p.Name, r.warnings(p.Name))
			}
			// A watch.Error (an expired version) carries a Status, not a
			// pod: the stream then ends and the pod is read afresh below.
			if np, ok := ev.Object.(*corev1.Pod); ok {
				p = np
				if ok, err := r.podStep(p, say); ok || err != nil {
					w.Stop()
					if err != nil {
						err = fmt.Errorf("%w%s", err, r.warnings(p.Name))
					}
					return p, err
				}
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return p, r.startTimeout(p)
		}
		// The watch ended (a server timeout): read the pod and watch again.
		np, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return p, fmt.Errorf("kubernetes: pod %s was deleted while starting", p.Name)
		}
		if err != nil {
			if ctx.Err() != nil {
				return p, r.startTimeout(p)
			}
			return p, apiErr("get pod", err)
		}
		p, rv = np, np.ResourceVersion
	}
}

func (r *Runtime) startTimeout(p *corev1.Pod) error {
	return fmt.Errorf("kubernetes: pod %s did not run within %s (phase %s)%s", p.Name, r.cfg.StartTimeout, p.Status.Phase, r.warnings(p.Name))
}

// Reasons a container waits that will not pass on their own.
var fatalWaiting = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
	"CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff"}

// podStep reports the steps p has reached; true once the environment's
// container runs, an error when it cannot.
func (r *Runtime) podStep(p *corev1.Pod, say func(string)) (bool, error) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			switch {
			case c.Status == corev1.ConditionTrue:
				say("scheduled")
			case c.Reason == corev1.PodReasonUnschedulable:
				return false, fmt.Errorf("kubernetes: pod %s cannot be scheduled: %s", p.Name, c.Message)
			}
		}
	}
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		_, detail := podState(p)
		return false, fmt.Errorf("kubernetes: pod %s ended while starting: %s", p.Name, detail)
	}
	for _, cs := range p.Status.InitContainerStatuses {
		if w := cs.State.Waiting; w != nil && slices.Contains(fatalWaiting, w.Reason) {
			return false, fmt.Errorf("kubernetes: the agent image %s: %s: %s", cs.Image, w.Reason, w.Message)
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return false, fmt.Errorf("kubernetes: injecting the agent failed: exit code %d: %s %s", t.ExitCode, t.Reason, t.Message)
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != ContainerName {
			continue
		}
		if cs.ImageID != "" {
			say("image_pulled")
		}
		if w := cs.State.Waiting; w != nil && slices.Contains(fatalWaiting, w.Reason) {
			return false, fmt.Errorf("kubernetes: image %s: %s: %s", cs.Image, w.Reason, w.Message)
		}
		if cs.State.Running != nil {
			say("image_pulled")
			say("started")
			return true, nil
		}
		if t := cs.State.Terminated; t != nil {
			return false, fmt.Errorf("kubernetes: the agent ended at once: exit code %d: %s %s", t.ExitCode, t.Reason, t.Message)
		}
	}
	return false, nil
}

// warnings are the pod's recent Warning events, for an error's end.
func (r *Runtime) warnings(pod string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := r.cs.CoreV1().Events(r.cfg.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", pod), fields.OneTermEqualSelector("type", corev1.EventTypeWarning)).String(),
	})
	if err != nil || len(list.Items) == 0 {
		return ""
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].LastTimestamp.Before(&list.Items[j].LastTimestamp) })
	var out []string
	for _, e := range list.Items[max(0, len(list.Items)-3):] {
		out = append(out, e.Reason+": "+e.Message)
	}
	return " (events: " + strings.Join(out, "; ") + ")"
}

// podFor is the pod of an environment.
func (r *Runtime) podFor(spec ports.EnvironmentSpec, network ports.NetworkMode) *corev1.Pod {
	name := r.ObjectName(spec.Name)
	image := spec.Image
	if image == "" {
		image = r.cfg.DefaultImage
	}
	res := spec.Resources
	if res.CPUs == 0 {
		res.CPUs = r.cfg.Defaults.CPUs
	}
	if res.MemoryMB == 0 {
		res.MemoryMB = r.cfg.Defaults.MemoryMB
	}
	if res.DiskGB == 0 {
		res.DiskGB = r.cfg.Defaults.DiskGB
	}
	limits := corev1.ResourceList{}
	if res.CPUs > 0 {
		limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(res.CPUs*1000+0.5), resource.DecimalSI)
	}
	if res.MemoryMB > 0 {
		limits[corev1.ResourceMemory] = *resource.NewQuantity(int64(res.MemoryMB)<<20, resource.BinarySI)
	}
	if res.DiskGB > 0 {
		limits[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(res.DiskGB)<<30, resource.BinarySI)
	}
	env := []corev1.EnvVar{
		{Name: "AGENT_ID", Value: spec.Name},
		{Name: "AGENT_SECRET_FILE", Value: SecretPath},
		{Name: "MANAGEMENT_SERVER", Value: r.server.String()},
		{Name: "AGENT_RUNTIME", Value: string(ports.KindContainer)},
		// Files and tunnels get a connection of their own beside the control stream.
		{Name: "MANAGEMENT_BULK_CONNECTION", Value: "1"},
	}
	if len(r.cfg.CA) > 0 {
		env = append(env, corev1.EnvVar{Name: "MANAGEMENT_CA", Value: CAPath})
	}
	if network == ports.NetworkProxy {
		env = append(env, corev1.EnvVar{Name: "AGENT_EGRESS_PROXY", Value: ports.EgressProxyAddr})
	}
	root, zero := int64(0), int64(0)
	caps := &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	if spec.Profile != ProfileRoot {
		// The agent stays root with only what starting its commands as
		// nobody takes; they run with no capabilities at all, in /tmp.
		env = append(env,
			corev1.EnvVar{Name: "AGENT_RUN_AS", Value: "65534:65534"},
			corev1.EnvVar{Name: "AGENT_RUN_AS_HOME", Value: "/tmp"},
			corev1.EnvVar{Name: "HOME", Value: "/tmp"})
		caps.Add = []corev1.Capability{"SETUID", "SETGID", "KILL"}
	}
	no, yes := false, true
	readOnly := spec.ReadOnlyRoot
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	secretMode := int32(0o400)
	grace := int64(r.cfg.StopGrace / time.Second)
	items := []corev1.KeyToPath{{Key: keySecret, Path: keySecret}}
	if len(r.cfg.CA) > 0 {
		items = append(items, corev1.KeyToPath{Key: keyCA, Path: keyCA})
	}
	mounts := []corev1.VolumeMount{
		{Name: "agent", MountPath: AgentDir, ReadOnly: true},
		{Name: "credentials", MountPath: CredsDir, ReadOnly: true},
	}
	volumes := []corev1.Volume{
		{Name: "agent", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "credentials", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name, DefaultMode: &secretMode, Items: items}}},
	}
	if readOnly {
		mounts = append(mounts, corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"})
		volumes = append(volumes, corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	// A lost node's pods go after 30 s rather than Kubernetes' 5 minutes: an
	// environment whose agent cannot come back is better failed early.
	lost := int64(30)
	tolerations := []corev1.Toleration{
		{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &lost},
		{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &lost},
	}
	for _, t := range spec.Placement.Tolerations {
		tolerations = append(tolerations, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	var runtimeClass *string
	if spec.Tier != "" {
		rc := r.cfg.RuntimeClasses[spec.Tier]
		runtimeClass = &rc
	}
	hostname := name
	if ports.ValidEnvironmentName(spec.Name) && dnsLabel.MatchString(spec.Name) {
		hostname = spec.Name
	}
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: r.cfg.Namespace, Labels: r.labels(spec.Name),
			Annotations: map[string]string{AnnotationEnv: spec.Name},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			Hostname:                      hostname,
			TerminationGracePeriodSeconds: &grace,
			RuntimeClassName:              runtimeClass,
			NodeSelector:                  spec.Placement.NodeSelector,
			Tolerations:                   tolerations,
			SecurityContext:               &corev1.PodSecurityContext{SeccompProfile: seccomp},
			Volumes:                       volumes,
			InitContainers: []corev1.Container{{
				Name: initName, Image: r.cfg.AgentImage, ImagePullPolicy: r.cfg.PullPolicy,
				Command:      []string{ImageAgentPath, "install", AgentPath},
				VolumeMounts: []corev1.VolumeMount{{Name: "agent", MountPath: AgentDir}},
				Resources:    corev1.ResourceRequirements{Limits: limits, Requests: limits},
				SecurityContext: &corev1.SecurityContext{
					RunAsUser: &zero, RunAsGroup: &zero, AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, SeccompProfile: seccomp,
				},
			}},
			Containers: []corev1.Container{{
				Name: ContainerName, Image: image, ImagePullPolicy: r.cfg.PullPolicy,
				// Command and Args both set: the image's entrypoint and CMD
				// were meant for something else than the agent.
				Command: []string{AgentPath}, Args: []string{},
				Env:          env,
				VolumeMounts: mounts,
				Resources:    corev1.ResourceRequirements{Limits: limits, Requests: limits},
				SecurityContext: &corev1.SecurityContext{
					RunAsUser: &root, RunAsGroup: &root, RunAsNonRoot: &no,
					AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &readOnly,
					Capabilities: caps, SeccompProfile: seccomp,
				},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
		},
	}
	if image == r.cfg.DefaultImage && r.cfg.DefaultImageHasAgent {
		// The image's own agent, root's and read-only to the workload:
		// nothing to inject.
		pod.Spec.InitContainers = nil
		pod.Spec.Volumes = slices.DeleteFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "agent" })
		c := &pod.Spec.Containers[0]
		c.Command = []string{ImageAgentPath}
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "agent" })
	}
	return pod
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// policyFor closes an environment's pod: nothing in, and out only to the
// agent port (and, when the server is named rather than addressed, the
// cluster's DNS to find it).
func (r *Runtime) policyFor(name string, owner *corev1.Secret) *networkingv1.NetworkPolicy {
	port := intstr.Parse(r.server.Port()) // New made it a number
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	egress := []networkingv1.NetworkPolicyEgressRule{}
	if ip := net.ParseIP(r.serverH); ip != nil {
		bits := 32
		if ip.To4() == nil {
			bits = 128
		}
		egress = append(egress, networkingv1.NetworkPolicyEgressRule{
			To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: ip.String() + "/" + strconv.Itoa(bits)}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
		})
	} else {
		dns := intstr.FromInt32(53)
		egress = append(egress,
			networkingv1.NetworkPolicyEgressRule{
				To: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "agentic-mgmt"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			},
			networkingv1.NetworkPolicyEgressRule{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
			})
	}
	ctrl := true
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name: r.ObjectName(name), Namespace: r.cfg.Namespace, Labels: r.labels(name),
			Annotations:     map[string]string{AnnotationEnv: name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: owner.Name, UID: owner.UID, Controller: &ctrl}},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelEnvID: r.envID(name), LabelOwner: r.cfg.Owner}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{},
			Egress:      egress,
		},
	}
}

// Start implements ports.Runtime: the pod made again from the Secret.
func (r *Runtime) Start(ctx context.Context, name string) error {
	sec, err := r.anchor(ctx, name)
	if err != nil {
		return err
	}
	p, err := r.pod(ctx, name)
	if err != nil {
		return err
	}
	if p != nil && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
		return nil // already there
	}
	if p != nil {
		if err := r.deletePod(ctx, name, 0); err != nil {
			return err
		}
	}
	if sec.Annotations[AnnotationStopped] != "" {
		if err := r.setStopped(ctx, sec, false); err != nil {
			return err
		}
	}
	_, err = r.startPod(ctx, sec, name, func(string) {}, nil)
	return err
}

func (r *Runtime) setStopped(ctx context.Context, sec *corev1.Secret, stopped bool) error {
	patch := `{"metadata":{"annotations":{"` + AnnotationStopped + `":null}}}`
	if stopped {
		patch = `{"metadata":{"annotations":{"` + AnnotationStopped + `":"true"}}}`
	}
	_, err := r.cs.CoreV1().Secrets(r.cfg.Namespace).Patch(ctx, sec.Name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return apiErr("patch secret", err)
	}
	return nil
}

// KeepIdentity implements ports.IdentityKeeper: a pool member handed over
// keeps its new identity in its Secret, and the pod Start makes reads it
// (AGENT_IDENTITY_FILE, mounted read-only) instead of the member's revoked
// one. The running pod is left alone: its agent already is agentID.
func (r *Runtime) KeepIdentity(ctx context.Context, name, agentID, secret string) error {
	for {
		sec, err := r.anchor(ctx, name)
		if err != nil {
			return err
		}
		var pod corev1.Pod
		if err := json.Unmarshal([]byte(sec.Annotations[AnnotationPod]), &pod); err != nil {
			return fmt.Errorf("kubernetes: the pod kept with %s: %w", name, err)
		}
		identityPath := CredsDir + "/" + keyIdentity
		for i := range pod.Spec.Volumes {
			if v := pod.Spec.Volumes[i].Secret; v != nil && !slices.ContainsFunc(v.Items, func(k corev1.KeyToPath) bool { return k.Key == keyIdentity }) {
				v.Items = append(v.Items, corev1.KeyToPath{Key: keyIdentity, Path: keyIdentity})
			}
		}
		for i := range pod.Spec.Containers {
			c := &pod.Spec.Containers[i]
			if c.Name == ContainerName && !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "AGENT_IDENTITY_FILE" }) {
				c.Env = append(c.Env, corev1.EnvVar{Name: "AGENT_IDENTITY_FILE", Value: identityPath})
			}
		}
		podJSON, err := json.Marshal(&pod)
		if err != nil {
			return err
		}
		sec.Annotations[AnnotationPod] = string(podJSON)
		if sec.Data == nil {
			sec.Data = map[string][]byte{}
		}
		sec.Data[keyIdentity] = fmt.Appendf(nil, "AGENT_ID=%s\nAGENT_SECRET=%s\n", agentID, secret)
		_, err = r.cs.CoreV1().Secrets(r.cfg.Namespace).Update(ctx, sec, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue // changed meanwhile (a stop): read it again
		}
		if err != nil {
			return apiErr("update secret", err)
		}
		return nil
	}
}

// Stop implements ports.Runtime: the pod is deleted (SIGTERM, then SIGKILL
// after its grace period), the Secret kept and marked stopped.
func (r *Runtime) Stop(ctx context.Context, name string) error {
	sec, err := r.anchor(ctx, name)
	if err != nil {
		return err
	}
	if err := r.setStopped(ctx, sec, true); err != nil {
		return err
	}
	return r.deletePod(ctx, name, int64(r.cfg.StopGrace/time.Second))
}

// deletePod deletes the environment's pod and waits until it is gone.
func (r *Runtime) deletePod(ctx context.Context, name string, grace int64) error {
	pods := r.cs.CoreV1().Pods(r.cfg.Namespace)
	obj := r.ObjectName(name)
	err := pods.Delete(ctx, obj, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return apiErr("delete pod", err)
	}
	for {
		if _, err := pods.Get(ctx, obj, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil && ctx.Err() == nil {
			return apiErr("get pod", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubernetes: pod %s still there: %w", obj, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Hibernate is not offered: a pod cannot be saved with its memory, and deleting it loses its filesystem.
func (r *Runtime) Hibernate(context.Context, string) (ports.Hibernation, error) {
	return ports.Hibernation{}, fmt.Errorf("%w: the kubernetes runtime cannot hibernate", ports.ErrUnsupported)
}

// Wake is not offered either.
func (r *Runtime) Wake(context.Context, string) error {
	return fmt.Errorf("%w: the kubernetes runtime cannot hibernate", ports.ErrUnsupported)
}

// Pause implements ports.Runtime: pods cannot be frozen.
func (r *Runtime) Pause(context.Context, string) error {
	return fmt.Errorf("%w: pause (kubernetes pods cannot be frozen)", ports.ErrUnsupported)
}

// Resume implements ports.Runtime.
func (r *Runtime) Resume(context.Context, string) error {
	return fmt.Errorf("%w: resume (kubernetes pods cannot be frozen)", ports.ErrUnsupported)
}

// Destroy implements ports.Runtime: pod, NetworkPolicy and Secret, waiting
// until the pod is gone.
func (r *Runtime) Destroy(ctx context.Context, name string) error {
	if _, err := r.anchor(ctx, name); err != nil {
		if p, perr := r.pod(ctx, name); perr != nil || p == nil {
			return err
		}
	}
	return r.remove(ctx, name)
}

func (r *Runtime) remove(ctx context.Context, name string) error {
	obj := r.ObjectName(name)
	var errs []error
	if err := r.deletePod(ctx, name, 0); err != nil {
		errs = append(errs, err)
	}
	if err := r.cs.NetworkingV1().NetworkPolicies(r.cfg.Namespace).Delete(ctx, obj, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, apiErr("delete network policy", err))
	}
	if err := r.cs.CoreV1().Secrets(r.cfg.Namespace).Delete(ctx, obj, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, apiErr("delete secret", err))
	}
	return errors.Join(errs...)
}

// Inspect implements ports.Runtime.
func (r *Runtime) Inspect(ctx context.Context, name string) (ports.Environment, error) {
	sec, err := r.anchor(ctx, name)
	if err != nil {
		return ports.Environment{}, err
	}
	p, err := r.pod(ctx, name)
	if err != nil {
		return ports.Environment{}, err
	}
	return r.toEnv(sec, p), nil
}

// List implements ports.Runtime: every environment of this owner, any state.
func (r *Runtime) List(ctx context.Context) ([]ports.Environment, error) {
	secs, err := r.cs.CoreV1().Secrets(r.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: r.ownerSelector()})
	if err != nil {
		return nil, apiErr("list secrets", err)
	}
	pods, err := r.cs.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: r.ownerSelector()})
	if err != nil {
		return nil, apiErr("list pods", err)
	}
	byName := map[string]*corev1.Pod{}
	for i := range pods.Items {
		byName[pods.Items[i].Name] = &pods.Items[i]
	}
	out := make([]ports.Environment, 0, len(secs.Items))
	for i := range secs.Items {
		s := &secs.Items[i]
		name := s.Annotations[AnnotationEnv]
		if !r.ours(s, name) || s.Name != r.ObjectName(name) {
			continue // not one this server made under that name
		}
		p := byName[s.Name]
		if p != nil && !r.ours(p, name) {
			p = nil
		}
		out = append(out, r.toEnv(s, p))
	}
	return out, nil
}

// Recover implements ports.Runtime: pods need no host-side plumbing; their
// agents dial the server again on their own.
func (r *Runtime) Recover(ctx context.Context) ([]ports.Environment, error) {
	return r.List(ctx)
}

func (r *Runtime) toEnv(sec *corev1.Secret, p *corev1.Pod) ports.Environment {
	env := ports.Environment{
		Name: sec.Annotations[AnnotationEnv], Runtime: RuntimeName, CreatedAt: sec.CreationTimestamp.Time,
		Network: ports.NetworkMode(sec.Annotations[AnnotationNetwork]),
	}
	env.Labels = annotatedLabels(sec.Annotations)
	var kept corev1.Pod
	if json.Unmarshal([]byte(sec.Annotations[AnnotationPod]), &kept) == nil && len(kept.Spec.Containers) > 0 {
		c := kept.Spec.Containers[0]
		env.Image = c.Image
		if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
			env.Resources.CPUs = float64(q.MilliValue()) / 1000
		}
		if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
			env.Resources.MemoryMB = int(q.Value() >> 20)
		}
		if q, ok := c.Resources.Limits[corev1.ResourceEphemeralStorage]; ok {
			env.Resources.DiskGB = int(q.Value() >> 30)
		}
	}
	switch {
	case p == nil && sec.Annotations[AnnotationStopped] != "":
		env.State = ports.EnvStopped
	case p == nil:
		env.State, env.Detail = ports.EnvFailed, "its pod was deleted outside agentic-sandbox (kubectl delete, eviction or a lost node)"
	case p.DeletionTimestamp != nil && sec.Annotations[AnnotationStopped] != "":
		env.RuntimeID, env.State = string(p.UID), ports.EnvStopped
	case p.DeletionTimestamp != nil:
		env.RuntimeID, env.State, env.Detail = string(p.UID), ports.EnvFailed, "its pod is being deleted outside agentic-sandbox"
	default:
		env.RuntimeID = string(p.UID)
		env.State, env.Detail = podState(p)
	}
	return env
}

// podState maps a pod's phase and its container's state onto an
// environment state, with why it is not running.
func podState(p *corev1.Pod) (ports.EnvState, string) {
	why := func() string {
		var parts []string
		if p.Status.Reason != "" {
			parts = append(parts, p.Status.Reason)
		}
		if p.Status.Message != "" {
			parts = append(parts, p.Status.Message)
		}
		for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			if t := cs.State.Terminated; t != nil && (t.ExitCode != 0 || cs.Name == ContainerName) {
				parts = append(parts, fmt.Sprintf("%s: exit code %d %s", cs.Name, t.ExitCode, t.Reason))
			}
			if w := cs.State.Waiting; w != nil && slices.Contains(fatalWaiting, w.Reason) {
				parts = append(parts, fmt.Sprintf("%s: %s %s", cs.Name, w.Reason, w.Message))
			}
		}
		return strings.Join(parts, "; ")
	}
	switch p.Status.Phase {
	case corev1.PodRunning:
		return ports.EnvRunning, ""
	case corev1.PodSucceeded:
		return ports.EnvStopped, why()
	case corev1.PodFailed:
		return ports.EnvFailed, why()
	}
	if d := why(); d != "" {
		return ports.EnvFailed, d
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
			return ports.EnvFailed, "unschedulable: " + c.Message
		}
	}
	return ports.EnvCreating, ""
}
