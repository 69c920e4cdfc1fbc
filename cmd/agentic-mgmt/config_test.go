package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/internal/ociimage"
)

// load runs loadConfig with no config file, a data dir of the test's own
// and the given environment.
func load(t *testing.T, args []string, env ...string) (Config, error) {
	t.Helper()
	base := []string{"SECRETS_DIR=" + t.TempDir() + "/secrets"}
	return loadConfig(append([]string{"--config", "/nonexistent"}, args...), append(base, env...), io.Discard, "test")
}

func libvirtOpts(t *testing.T, cfg Config) libvirtOptions {
	t.Helper()
	o, ok := cfg.RuntimeOptions[libvirtRuntime.Name].(libvirtOptions)
	if !ok {
		t.Fatalf("libvirt options: %#v", cfg.RuntimeOptions[libvirtRuntime.Name])
	}
	return o
}

// AGENTIC_LIBVIRT_RESTORE takes 0, 1 or all; anything else stops the start
// instead of quietly meaning one of them.
func TestLibvirtRestoreSetting(t *testing.T) {
	for v, want := range map[string][2]bool{"": {false, false}, "1": {false, false}, "0": {true, false}, "all": {false, true}} {
		var env []string
		if v != "" {
			env = append(env, "AGENTIC_LIBVIRT_RESTORE="+v)
		}
		cfg, err := load(t, nil, env...)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		o := libvirtOpts(t, cfg)
		if got := [2]bool{o.NoRestore, o.RestoreAll}; got != want {
			t.Errorf("%q: no restore, all = %v, want %v", v, got, want)
		}
	}
	for _, bad := range []string{"yes", "ALL", "2", "0,all"} {
		_, err := load(t, nil, "AGENTIC_LIBVIRT_RESTORE="+bad)
		if err == nil || !strings.Contains(err.Error(), "AGENTIC_LIBVIRT_RESTORE") || !strings.Contains(err.Error(), "want 0, 1 or all") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestLibvirtSettings(t *testing.T) {
	cfg, err := load(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := libvirtOpts(t, cfg)
	wd, _ := os.Getwd()
	want := libvirtOptions{VMImageDir: filepath.Join(wd, "build", "vm"), Accel: "auto", ImageDir: filepath.Join(cfg.DataDir, "images")}
	if o != want {
		t.Errorf("defaults: %+v, want %+v", o, want)
	}

	// Flags override the environment, which overrides the env file.
	file := filepath.Join(t.TempDir(), "management.env")
	if err := os.WriteFile(file, []byte("AGENTIC_LIBVIRT_ACCEL=kvm\nLIBVIRT_DEFAULT_URI=qemu+ssh://far/system\nAGENTIC_IMAGE_DIR=/srv/file-images\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = loadConfig([]string{"--config", file, "--vm-image-dir", "/srv/vm", "--libvirt-accel", "tcg"},
		[]string{"SECRETS_DIR=" + t.TempDir() + "/secrets", "AGENTIC_IMAGE_DIR=/srv/images"}, io.Discard, "test")
	if err != nil {
		t.Fatal(err)
	}
	o = libvirtOpts(t, cfg)
	want = libvirtOptions{URI: "qemu+ssh://far/system", VMImageDir: "/srv/vm", Accel: "tcg", ImageDir: "/srv/images"}
	if o != want {
		t.Errorf("set: %+v, want %+v", o, want)
	}

	for _, bad := range []string{"KVM", "hvf", ""} {
		_, err := load(t, nil, "AGENTIC_LIBVIRT_ACCEL="+bad)
		if err == nil || !strings.Contains(err.Error(), "AGENTIC_LIBVIRT_ACCEL") || !strings.Contains(err.Error(), "want kvm, tcg or auto") {
			t.Errorf("accel %q: %v", bad, err)
		}
	}
	if _, err := load(t, nil, "LIBVIRT_DEFAULT_URI=system"); err == nil || !strings.Contains(err.Error(), "LIBVIRT_DEFAULT_URI") {
		t.Errorf("LIBVIRT_DEFAULT_URI=system: %v", err)
	}
	if _, err := load(t, []string{"--libvirt-accel", "fast"}); err == nil || !strings.Contains(err.Error(), "AGENTIC_LIBVIRT_ACCEL") {
		t.Errorf("--libvirt-accel fast: %v", err)
	}
}

func TestDockerSettings(t *testing.T) {
	cfg, err := load(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := cfg.RuntimeOptions[dockerRuntime.Name]; o != (dockerOptions{}) {
		t.Errorf("defaults: %+v; want the client's default socket", o)
	}
	cfg, err = load(t, nil, "DOCKER_HOST=unix:///run/private/docker.sock")
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.RuntimeOptions[dockerRuntime.Name].(dockerOptions)
	if o.Host != "unix:///run/private/docker.sock" {
		t.Errorf("DOCKER_HOST: %+v", o)
	}
	// A dockerd named is a dockerd found, whether or not the socket exists.
	if !dockerRuntime.entry().Found(cfg) {
		t.Error("DOCKER_HOST set, docker not found")
	}
	for _, bad := range []string{"/var/run/docker.sock", "docker.sock", "::"} {
		if _, err := load(t, nil, "DOCKER_HOST="+bad); err == nil || !strings.Contains(err.Error(), "DOCKER_HOST") {
			t.Errorf("DOCKER_HOST=%s: %v; want it refused, naming the variable", bad, err)
		}
	}
}

// Runtimes are named from the catalog only; a typo stops the start and
// lists the known names.
func TestRuntimeNamesAreChecked(t *testing.T) {
	cfg, err := load(t, nil, "AGENTIC_RUNTIMES= host, docker,host", "AGENTIC_TASK_RUNTIME=docker")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Runtimes, ",") != "host,docker" || cfg.TaskRuntime != "docker" {
		t.Errorf("runtimes %v, task runtime %q", cfg.Runtimes, cfg.TaskRuntime)
	}
	for _, env := range []string{"AGENTIC_RUNTIMES=host,dokcer", "AGENTIC_TASK_RUNTIME=vm"} {
		_, err := load(t, nil, env)
		name, _, _ := strings.Cut(env, "=")
		if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), strings.Join(runtimeNames(), ", ")) {
			t.Errorf("%s: %v; want an error naming the variable and the known runtimes", env, err)
		}
	}
}

// --help shows every runtime's flags and one line per runtime.
func TestHelpListsTheRuntimes(t *testing.T) {
	var out bytes.Buffer
	_, err := loadConfig([]string{"--help"}, nil, &out, "test")
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	help := out.String()
	for _, e := range runtimeCatalog {
		if !strings.Contains(help, "  "+e.Name+" ") || !strings.Contains(help, unmark(e.Help)) {
			t.Errorf("--help does not list runtime %s:\n%s", e.Name, help)
		}
		for _, s := range e.Settings {
			if s.Flag != "" && !strings.Contains(help, "-"+s.Flag) {
				t.Errorf("--help lacks -%s:\n%s", s.Flag, help)
			}
		}
	}
}

// AGENTIC_TASK_REPO_DIRS lists existing absolute directories, links
// resolved, none overlapping the data dir; anything else stops the start.
func TestTaskRepoDirsSetting(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(b, link); err != nil {
		t.Fatal(err)
	}
	if cfg, err := load(t, nil); err != nil || cfg.TaskRepoDirs != nil {
		t.Errorf("default: %q %v, want none", cfg.TaskRepoDirs, err)
	}
	if cfg, err := load(t, nil, "AGENTIC_TASK_REPO_DIRS="+a+","+link); err != nil || len(cfg.TaskRepoDirs) != 2 || cfg.TaskRepoDirs[0] != a || cfg.TaskRepoDirs[1] != b {
		t.Errorf("env: %q %v", cfg.TaskRepoDirs, err)
	}
	if cfg, err := load(t, []string{"--task-repo-dirs", a + ":" + b}, "AGENTIC_TASK_REPO_DIRS=/nonexistent"); err != nil || len(cfg.TaskRepoDirs) != 2 {
		t.Errorf("flag over env: %q %v", cfg.TaskRepoDirs, err)
	}
	data := t.TempDir()
	for _, bad := range []string{"relative", filepath.Join(a, "missing"), data, filepath.Dir(data), filepath.Join(data, "task-work")} {
		_ = os.MkdirAll(filepath.Join(data, "task-work"), 0o700)
		if _, err := loadConfig([]string{"--config", "/nonexistent"}, []string{"SECRETS_DIR=" + data + "/secrets", "AGENTIC_TASK_REPO_DIRS=" + bad}, io.Discard, "test"); err == nil || !strings.Contains(err.Error(), "AGENTIC_TASK_REPO_DIRS") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func kubernetesOpts(t *testing.T, cfg Config) kubernetesOptions {
	t.Helper()
	o, ok := cfg.RuntimeOptions[kubernetesRuntime.Name].(kubernetesOptions)
	if !ok {
		t.Fatalf("kubernetes options: %#v", cfg.RuntimeOptions[kubernetesRuntime.Name])
	}
	return o
}

// The kubernetes runtime's settings: defaults naming the project's own
// images, each set, and each bad value refused at start naming its variable.
func TestKubernetesSettings(t *testing.T) {
	t.Setenv(kubeServiceHostEnv, "") // not in a pod, whatever runs the test
	cfg, err := load(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := kubernetesOpts(t, cfg)
	if o.Kubeconfig != nil || o.Namespace != "agentic-sandbox" || o.AgentImage != ociimage.AgentImage || o.DefaultImage != ociimage.WorkloadImage ||
		o.PullPolicy != "IfNotPresent" || o.RuntimeClasses != nil || o.NetworkPolicy {
		t.Errorf("defaults: %+v", o)
	}
	if kubernetesRuntime.entry().Found(cfg) {
		t.Error("found with KUBECONFIG unset outside a pod")
	}

	dir := t.TempDir()
	kc := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	cfg, err = load(t, nil, "KUBECONFIG="+kc+"::missing.kubeconfig", "AGENTIC_K8S_NAMESPACE=agents-1",
		"AGENTIC_K8S_AGENT_IMAGE=registry.example:5000/team/agent@sha256:"+strings.Repeat("a", 64), "AGENTIC_K8S_IMAGE=localhost/work:2",
		"AGENTIC_K8S_PULL_POLICY=Never", "AGENTIC_K8S_RUNTIME_CLASSES= gvisor=runsc ", "AGENTIC_K8S_NETWORK_POLICY=enforced")
	if err != nil {
		t.Fatal(err)
	}
	o = kubernetesOpts(t, cfg)
	want := kubernetesOptions{Kubeconfig: []string{kc, filepath.Join(dir, "missing.kubeconfig")}, Namespace: "agents-1",
		AgentImage: "registry.example:5000/team/agent@sha256:" + strings.Repeat("a", 64), DefaultImage: "localhost/work:2",
		PullPolicy: "Never", RuntimeClasses: map[string]string{"gvisor": "runsc"}, NetworkPolicy: true}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("set:\n got %+v\nwant %+v", o, want)
	}
	// One of KUBECONFIG's files there is a cluster found; none there is not.
	if !kubernetesRuntime.entry().Found(cfg) {
		t.Error("KUBECONFIG names a file that exists, kubernetes not found")
	}
	if cfg, err := load(t, nil, "KUBECONFIG="+filepath.Join(dir, "nope")); err != nil || kubernetesRuntime.entry().Found(cfg) {
		t.Errorf("KUBECONFIG naming no file: found, or %v", err)
	}
	// In a pod: the service host set and the token mounted.
	t.Setenv(kubeServiceHostEnv, "10.96.0.1")
	if cfg, err := load(t, nil); err != nil || kubernetesRuntime.entry().Found(cfg) != exists(kubeTokenFile) {
		t.Errorf("in a pod: found %v with the token file there %v (%v)", kubernetesRuntime.entry().Found(cfg), exists(kubeTokenFile), err)
	}

	for _, bad := range []string{
		"AGENTIC_K8S_NAMESPACE=", "AGENTIC_K8S_NAMESPACE=Agents", "AGENTIC_K8S_NAMESPACE=a.b", "AGENTIC_K8S_NAMESPACE=" + strings.Repeat("n", 64),
		"AGENTIC_K8S_AGENT_IMAGE=", "AGENTIC_K8S_AGENT_IMAGE=agent image", "AGENTIC_K8S_AGENT_IMAGE=Team/Agent:1",
		"AGENTIC_K8S_IMAGE=", "AGENTIC_K8S_IMAGE=busybox:", "AGENTIC_K8S_IMAGE=busybox@sha256:short",
		"AGENTIC_K8S_PULL_POLICY=sometimes", "AGENTIC_K8S_PULL_POLICY=never",
		"AGENTIC_K8S_RUNTIME_CLASSES=kata=kata-qemu", "AGENTIC_K8S_RUNTIME_CLASSES=gvisor", "AGENTIC_K8S_RUNTIME_CLASSES=gvisor=",
		"AGENTIC_K8S_RUNTIME_CLASSES=gvisor=Run_SC", "AGENTIC_K8S_RUNTIME_CLASSES=gvisor=runsc,gvisor=gvisor",
		"AGENTIC_K8S_NETWORK_POLICY=yes", "AGENTIC_K8S_NETWORK_POLICY=Enforced",
	} {
		name, _, _ := strings.Cut(bad, "=")
		if _, err := load(t, nil, bad); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v; want it refused, naming the variable", bad, err)
		}
	}
}

// The preview settings: defaults, each set, and each bad value refused at
// start naming its variable.
func TestPreviewSettings(t *testing.T) {
	cfg, err := load(t, nil)
	if err != nil || cfg.PreviewDomain != "localhost" || cfg.PreviewKeepHost || cfg.ForwardIdle <= 0 || cfg.ForwardMax != 1024 {
		t.Fatalf("defaults: %+v %v", cfg, err)
	}
	cfg, err = load(t, []string{"--preview-domain", "Preview.Example.COM."}, "AGENTIC_PREVIEW_HOST=keep", "AGENTIC_PREVIEW_IDLE_TIMEOUT=90s", "AGENTIC_PREVIEW_MAX_CONNECTIONS=10")
	if err != nil || cfg.PreviewDomain != "preview.example.com" || !cfg.PreviewKeepHost || cfg.ForwardIdle.Seconds() != 90 || cfg.ForwardMax != 10 {
		t.Fatalf("set: %+v %v", cfg, err)
	}
	for _, bad := range [][2]string{
		{"AGENTIC_PREVIEW_DOMAIN", "*.example.com"},
		{"AGENTIC_PREVIEW_DOMAIN", "example.com:8080"},
		{"AGENTIC_PREVIEW_DOMAIN", "a..b"},
		{"AGENTIC_PREVIEW_HOST", "sometimes"},
		{"AGENTIC_PREVIEW_IDLE_TIMEOUT", "0s"},
		{"AGENTIC_PREVIEW_MAX_CONNECTIONS", "0"},
	} {
		if _, err := load(t, nil, bad[0]+"="+bad[1]); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%s=%s: %v", bad[0], bad[1], err)
		}
	}
}

// The sleep settings: defaults (no bound, the use case's wake timeout),
// each set, and each bad value refused at start naming its variable.
func TestSleepSettings(t *testing.T) {
	cfg, err := load(t, nil)
	if err != nil || cfg.HibernateMaxBytes != 0 || cfg.WakeTimeout != environment.DefaultWakeTimeout {
		t.Fatalf("defaults: max %d, wake %s, %v", cfg.HibernateMaxBytes, cfg.WakeTimeout, err)
	}
	cfg, err = load(t, nil, "AGENTIC_HIBERNATE_MAX_BYTES=10737418240", "AGENTIC_WAKE_TIMEOUT=45s")
	if err != nil || cfg.HibernateMaxBytes != 10<<30 || cfg.WakeTimeout != 45*time.Second {
		t.Fatalf("set: max %d, wake %s, %v", cfg.HibernateMaxBytes, cfg.WakeTimeout, err)
	}
	for _, bad := range [][2]string{
		{"AGENTIC_HIBERNATE_MAX_BYTES", "-1"},
		{"AGENTIC_HIBERNATE_MAX_BYTES", "10G"},
		{"AGENTIC_HIBERNATE_MAX_BYTES", "lots"},
		{"AGENTIC_WAKE_TIMEOUT", "0s"},
		{"AGENTIC_WAKE_TIMEOUT", "-1m"},
		{"AGENTIC_WAKE_TIMEOUT", "120"},
	} {
		if _, err := load(t, nil, bad[0]+"="+bad[1]); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%s=%s: %v", bad[0], bad[1], err)
		}
	}
}
