package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/kubernetes"
	"github.com/agentic-sandbox/agentic-sandbox/internal/ociimage"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// kubernetesOptions are the kubernetes runtime's settings.
type kubernetesOptions struct {
	// Kubeconfig are KUBECONFIG's files, absolute; none: the in-cluster
	// config of the pod agentic-mgmt runs in.
	Kubeconfig []string
	// Namespace holds every pod, Secret and NetworkPolicy of this server.
	Namespace string
	// AgentImage holds the static agent; DefaultImage runs when a spec
	// names no image.
	AgentImage, DefaultImage string
	PullPolicy               corev1.PullPolicy
	// RuntimeClasses maps a tier (ports.TierGVisor) to its RuntimeClass.
	RuntimeClasses map[string]string
	// NetworkPolicy declares that the cluster enforces NetworkPolicies.
	NetworkPolicy bool
}

// In a pod, client-go's in-cluster config reads the API server's address
// from this variable and the pod's service-account token from this file.
const (
	kubeServiceHostEnv = "KUBERNETES_SERVICE_HOST"
	kubeTokenFile      = "/var/run/secrets/kubernetes.io/serviceaccount/token" //nolint:gosec // a path, not a credential
)

// kubernetesTiers are the tiers AGENTIC_K8S_RUNTIME_CLASSES may map.
var kubernetesTiers = []string{ports.TierGVisor}

// kubernetesRuntime runs environments as pods on a Kubernetes cluster.
// Its DefaultRank is 0: a task naming no runtime never lands on it, since a
// cluster (often remote, shared and billed) must be chosen on purpose, not
// because a KUBECONFIG happened to be set where the server started.
var kubernetesRuntime = runtimeDef[kubernetesOptions]{
	Name: kubernetes.RuntimeName,
	Help: "a pod on a Kubernetes cluster, of any image (the agent injected by an init container), hardened, placed by the scheduler; its agent dials the agent port over TLS",
	FoundDoc: "when `KUBECONFIG` names a file that exists, or in a pod (`" + kubeServiceHostEnv + "` set and `" +
		kubeTokenFile + "` there)",
	HowTo: "point `KUBECONFIG` at a cluster (or run agentic-mgmt in a pod of it), and let pods reach the agent port: " +
		"`LISTEN_ADDR` on an address they reach (e.g. `0.0.0.0:8120`), `AGENTIC_ADVERTISE_HOST` the address they dial, " +
		"`AGENTIC_AGENT_TLS` not `off`",
	DefaultRank:  0,
	AgentInImage: true,
	Settings: []setting{
		{Env: "KUBECONFIG", DefaultDoc: "unset: the in-cluster config (agentic-mgmt in a pod of the cluster, its service account)",
			Doc: "the kubeconfig file the kubernetes runtime reaches its cluster with, at its current context (several, separated by `:`, are merged as kubectl merges them)"},
		{Env: "AGENTIC_K8S_NAMESPACE", Default: "agentic-sandbox",
			Doc: "the namespace (existing) of every pod, Secret and NetworkPolicy the kubernetes runtime makes; servers sharing one tell theirs apart by an owner label"},
		{Env: "AGENTIC_K8S_AGENT_IMAGE", Default: ociimage.AgentImage,
			Doc: "the image an init container copies the static `agentic-agent` from into each pod (`make agent-image` builds it as `build/images/agent.tar`)"},
		{Env: "AGENTIC_K8S_IMAGE", Default: ociimage.WorkloadImage,
			Doc: "the image of a kubernetes environment whose spec names none (`make agent-image` builds it as `build/images/workload.tar`: busybox, user `nobody`, and the agent, so its pods need no init container)"},
		{Env: "AGENTIC_K8S_PULL_POLICY", Default: string(corev1.PullIfNotPresent),
			Choices: []string{string(corev1.PullIfNotPresent), string(corev1.PullAlways), string(corev1.PullNever)},
			Doc:     "the pods' image pull policy for both images: `IfNotPresent`, `Always` or `Never` (images imported into the nodes, no registry)"},
		{Env: "AGENTIC_K8S_RUNTIME_CLASSES", DefaultDoc: "unset (no tier)",
			Doc: "isolation tiers and the RuntimeClass that runs each, `tier=class,…` (tiers: " + orList(quoted(kubernetesTiers)) +
				", e.g. `gvisor=runsc`); only these tiers are offered"},
		{Env: "AGENTIC_K8S_NETWORK_POLICY", Default: "none", Choices: []string{"none", "enforced"},
			Doc: "`enforced` declares that the cluster's network plugin enforces NetworkPolicies: then network modes `none` and `proxy` are offered (each environment a NetworkPolicy letting out only the agent port); `none`: only `bridge` (the pod network), since nothing could close it"},
	},
	Configure: configureKubernetes,
	Found: func(o kubernetesOptions) bool {
		if slices.ContainsFunc(o.Kubeconfig, exists) {
			return true
		}
		return len(o.Kubeconfig) == 0 && os.Getenv(kubeServiceHostEnv) != "" && exists(kubeTokenFile)
	},
	New: newKubernetes,
}

func quoted(words []string) []string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = "`" + w + "`"
	}
	return out
}

func configureKubernetes(v settingValues, _ Config) (kubernetesOptions, error) {
	o := kubernetesOptions{
		Namespace: v["AGENTIC_K8S_NAMESPACE"], AgentImage: v["AGENTIC_K8S_AGENT_IMAGE"], DefaultImage: v["AGENTIC_K8S_IMAGE"],
		PullPolicy: corev1.PullPolicy(v["AGENTIC_K8S_PULL_POLICY"]), NetworkPolicy: v["AGENTIC_K8S_NETWORK_POLICY"] == "enforced",
	}
	for _, f := range filepath.SplitList(v["KUBECONFIG"]) {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		abs, err := filepath.Abs(f)
		if err != nil {
			return o, fmt.Errorf("KUBECONFIG: %w", err)
		}
		o.Kubeconfig = append(o.Kubeconfig, abs)
	}
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return o, fmt.Errorf("AGENTIC_K8S_NAMESPACE %q: not a namespace name: %s", o.Namespace, strings.Join(errs, "; "))
	}
	for env, ref := range map[string]string{"AGENTIC_K8S_AGENT_IMAGE": o.AgentImage, "AGENTIC_K8S_IMAGE": o.DefaultImage} {
		if _, err := name.ParseReference(ref); err != nil {
			return o, fmt.Errorf("%s %q: not an image reference such as registry.example/agentic-sandbox/agent:1: %w", env, ref, err)
		}
	}
	var err error
	if o.RuntimeClasses, err = parseRuntimeClasses(v["AGENTIC_K8S_RUNTIME_CLASSES"]); err != nil {
		return o, fmt.Errorf("AGENTIC_K8S_RUNTIME_CLASSES: %w", err)
	}
	return o, nil
}

// parseRuntimeClasses reads tier=class pairs separated by commas.
func parseRuntimeClasses(v string) (map[string]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		tier, class, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || tier == "" || class == "" {
			return nil, fmt.Errorf("%q is not tier=RuntimeClass", pair)
		}
		if !slices.Contains(kubernetesTiers, tier) {
			return nil, fmt.Errorf("unknown tier %q (known: %s)", tier, strings.Join(kubernetesTiers, ", "))
		}
		if _, dup := out[tier]; dup {
			return nil, fmt.Errorf("tier %q is named twice", tier)
		}
		if errs := validation.IsDNS1123Subdomain(class); len(errs) > 0 {
			return nil, fmt.Errorf("%q is not a RuntimeClass name: %s", class, strings.Join(errs, "; "))
		}
		out[tier] = class
	}
	return out, nil
}

func newKubernetes(cfg Config, o kubernetesOptions, _ runtimeDeps) (ports.Runtime, func(), error) {
	serverURL, err := podServerURL(cfg)
	if err != nil {
		return nil, nil, err
	}
	kc := kubernetes.Config{
		Namespace: o.Namespace, Owner: owner(cfg), AgentImage: o.AgentImage, DefaultImage: o.DefaultImage,
		PullPolicy: o.PullPolicy, RuntimeClasses: o.RuntimeClasses, NetworkPolicy: o.NetworkPolicy, ServerURL: serverURL,
		DefaultImageHasAgent: carriesAgent(o.DefaultImage),
	}
	if kc.CA, err = agentCAPEM(cfg); err != nil {
		return nil, nil, err
	}
	switch len(o.Kubeconfig) {
	case 0:
		// Only a pod's own config: not ~/.kube/config, which a server
		// started without KUBECONFIG should not pick up behind its
		// operator's back.
		if kc.REST, err = rest.InClusterConfig(); err != nil {
			return nil, nil, fmt.Errorf("KUBECONFIG is unset and agentic-mgmt does not run in a pod (%w)", err)
		}
	case 1:
		kc.Kubeconfig = o.Kubeconfig[0]
	default:
		rules := &clientcmd.ClientConfigLoadingRules{Precedence: o.Kubeconfig}
		if kc.REST, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig(); err != nil {
			return nil, nil, fmt.Errorf("KUBECONFIG: %w", err)
		}
	}
	rt, err := kubernetes.New(kc)
	if err != nil {
		return nil, nil, err
	}
	return rt, nil, nil
}

// carriesAgent reports whether an image is the project's workload image
// (`make agent-image`'s, wherever it was pushed), which carries the agent:
// its pods need no init container.
func carriesAgent(image string) bool {
	ref, err := name.ParseReference(image)
	return err == nil && (ref.Context().RepositoryStr() == ociimage.WorkloadRepository ||
		strings.HasSuffix(ref.Context().RepositoryStr(), "/"+ociimage.WorkloadRepository))
}

// podServerURL is the agent port as pods dial it: over TLS, at
// AGENTIC_ADVERTISE_HOST. It refuses a configuration pods cannot reach,
// saying what to set.
func podServerURL(cfg Config) (string, error) {
	host, port, err := net.SplitHostPort(cfg.ListenAddr)
	if err != nil {
		return "", fmt.Errorf("LISTEN_ADDR %q: %w", cfg.ListenAddr, err)
	}
	if loopback(host) {
		return "", fmt.Errorf("pods cannot reach the agent port on %s (LISTEN_ADDR): set LISTEN_ADDR to an address pods reach, e.g. 0.0.0.0:%s, and AGENTIC_ADVERTISE_HOST to the address pods dial", cfg.ListenAddr, port)
	}
	if a := cfg.AdvertiseHost; a == "" || loopback(a) || net.ParseIP(a) != nil && net.ParseIP(a).IsUnspecified() {
		return "", fmt.Errorf("pods cannot dial AGENTIC_ADVERTISE_HOST %q: set it to the address pods reach this server's agent port at (LISTEN_ADDR %s)", a, cfg.ListenAddr)
	}
	if cfg.AgentTLS == "off" {
		return "", errors.New("pods dial the agent port over TLS only, and AGENTIC_AGENT_TLS is off: set it to auto (a CA of the server's own, given to each pod) or CERT.pem:KEY.pem")
	}
	return "https://" + net.JoinHostPort(cfg.AdvertiseHost, port), nil
}

func loopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}
