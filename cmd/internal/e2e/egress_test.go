package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// Issue 15 in a Docker container with no network device: commands reach
// exactly the allowed hosts through the agent's proxy and the agent link.
// A local HTTPS server stands in for the allowed host (example.com, which
// the test hook AGENTIC_TEST_RESOLVE points at 127.0.0.1, allowed by
// address for its port).
func TestEgressThroughTheAgentInDocker(t *testing.T) {
	host := privateDockerd(t)

	s := startServer(t, 0, t.TempDir(), append([]string{"DOCKER_HOST=" + host, "AGENTIC_RUNTIMES=docker", "AGENTIC_TASK_RUNTIME=docker"}, egressEnv...)...)
	egressScenario(t, s, "docker", "egress-1")
	// The agent's socket takes connections of its own: every tunnel was
	// raw (issue 33; the fallback: egress_tunnelraw_test.go).
	if log := s.Log(); !strings.Contains(log, "tunnel=raw") || strings.Contains(log, "tunnel=stream") {
		t.Errorf("the tunnels were not all raw:\n%s", log)
	}
	taskThroughTheProxy(t, s)

	// The agent killed mid-download: the tunnel ends, and so does the
	// server's connection to the destination (nothing left streaming).
	slow := newEndlessDownload(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := s.Client()
	proxyNet := "proxy"
	// And its client killed mid-download (below).
	abortSlow := newEndlessDownload(t)
	slowPort, abortPort := slow.port, abortSlow.port
	started, gone, abortGone := slow.started, slow.gone, abortSlow.gone
	allowed := []string{"example.com:" + slowPort, "127.0.0.1:" + slowPort, "example.com:" + abortPort, "127.0.0.1:" + abortPort}
	if r, err := c.CreateEnvironmentWithResponse(ctx, restapi.CreateEnvironmentRequest{Runtime: "docker", Name: "egress-kill", Network: &proxyNet, AllowedHosts: &allowed}); err != nil || r.StatusCode() >= 300 {
		t.Fatalf("create: %v %s", err, r.Body)
	}
	waitEnvReady(t, s, "egress-kill", 60*time.Second)
	putFile(t, s, "egress-kill", "/tmp/egressclient", egressClient(t), "0755")
	putFile(t, s, "egress-kill", "/tmp/ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: slow.Certificate().Raw}), "0644")

	// The client killed mid-download: the agent resets its tunnel, and the
	// destination's connection ends at once — the agent does not drain the
	// rest of the download for nobody (it did: a minute here).
	putFile(t, s, "egress-kill", "/tmp/ca2.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: abortSlow.Certificate().Raw}), "0644")
	aborted := execOK(t, s, "egress-kill", restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c",
		"timeout -s KILL 2 /tmp/egressclient https://example.com:" + abortPort + "/ /tmp/ca2.pem; echo exit=$?"})})
	select {
	case <-abortGone:
	case <-time.After(patience):
		t.Fatalf("the destination still streams %v after its client was killed: the tunnel was not reset (%q %q)", patience, aborted.Stdout, aborted.Stderr)
	}
	if r, err := c.StartCommandWithResponse(ctx, "egress-kill", restapi.ExecRequest{Command: "/tmp/egressclient",
		Args: ptr([]string{"https://example.com:" + slowPort + "/", "/tmp/ca.pem"})}); err != nil || r.JSON202 == nil {
		t.Fatalf("start the download: %v %v", err, r)
	}
	select {
	case <-started:
	case <-time.After(patience):
		t.Fatal("the download never started")
	}
	time.Sleep(300 * time.Millisecond)
	out, err := exec.Command("docker", "-H", host, "ps", "-q", "--filter", "label=io.agentic-sandbox.env=egress-kill").CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) == 0 {
		t.Fatalf("the container: %v %s", err, out)
	}
	if out, err := exec.Command("docker", "-H", host, "kill", strings.TrimSpace(string(out))).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v %s", err, out)
	}
	select {
	case <-gone:
	case <-time.After(patience):
		t.Fatalf("the destination still streams %v after the agent was killed: the tunnel did not end", patience)
	}
	eventually(t, patience, "the tunnel's end logged", func() bool {
		return strings.Contains(s.Log(), "msg=egress agent_id=egress-kill host=example.com port="+slowPort+" allowed=true")
	})
}

// The same in a VM under TCG: no NIC, the agent's proxy on the guest's
// loopback, the tunnel over virtio-serial.
func TestEgressThroughTheAgentInAVM(t *testing.T) {
	s := startLibvirtServer(t, egressEnv...)
	egressScenario(t, s, "libvirt", fmt.Sprintf("egress-vm-%d", time.Now().UnixNano()%100000))
	// One serial link, one connection: the tunnels stay Tunnel streams.
	if log := s.Log(); !strings.Contains(log, "tunnel=stream") || strings.Contains(log, "tunnel=raw") {
		t.Errorf("the tunnels were not all Tunnel streams:\n%s", log)
	}
}

// egressEnv lets proxy environments be made, and points the test names at
// the local servers.
var egressEnv = []string{"AGENTIC_ALLOWED_NETWORKS=none,proxy", "AGENTIC_TEST_RESOLVE=example.com=127.0.0.1,loop.test=127.0.0.1"}

func egressScenario(t *testing.T, s *harness.Server, runtime, name string) {
	big := make([]byte, 8<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	site := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			_, _ = w.Write(big)
			return
		}
		fmt.Fprint(w, "hello from the allowed host")
	}))
	t.Cleanup(site.Close)
	_, portStr, _ := net.SplitHostPort(site.Listener.Addr().String())
	other := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "must not be reached") }))
	t.Cleanup(other.Close)
	_, otherPort, _ := net.SplitHostPort(other.Listener.Addr().String())

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := s.Client()
	proxyNet := "proxy"
	allowed := []string{"example.com:" + portStr, "127.0.0.1:" + portStr, "loop.test:" + otherPort}
	created, err := c.CreateEnvironmentWithResponse(ctx, restapi.CreateEnvironmentRequest{Runtime: runtime, Name: name, Network: &proxyNet, AllowedHosts: &allowed})
	if err != nil || created.StatusCode() >= 300 {
		t.Fatalf("create: %v %s", err, created.Body)
	}
	t.Cleanup(func() { _, _ = c.DeleteEnvironmentWithResponse(context.Background(), name) })
	waitEnvReady(t, s, name, 120*time.Second)
	// A bad rule, and allowed hosts without the proxy mode, are refused.
	for _, body := range []restapi.CreateEnvironmentRequest{
		{Runtime: runtime, Name: "egress-bad", Network: &proxyNet, AllowedHosts: &[]string{"http://x.com"}},
		{Runtime: runtime, Name: "egress-bad", AllowedHosts: &[]string{"x.com"}},
		{Runtime: runtime, Name: "egress-bad", Network: &proxyNet},
	} {
		if r, err := c.CreateEnvironmentWithResponse(ctx, body); err != nil || r.StatusCode() != 400 {
			t.Errorf("create %+v: %v %d %s", body, err, r.StatusCode(), r.Body)
		}
	}

	// The client and the CA go in through the agent link.
	put := func(path string, b []byte, mode string) { putFile(t, s, name, path, b, mode) }
	put("/tmp/egressclient", egressClient(t), "0755")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: site.Certificate().Raw})
	ca2 := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: other.Certificate().Raw})
	put("/tmp/ca.pem", append(ca, ca2...), "0644")
	fetch := func(url string) string {
		t.Helper()
		r := execOK(t, s, name, restapi.ExecRequest{Command: "/tmp/egressclient", Args: ptr([]string{url, "/tmp/ca.pem"})})
		return r.Stdout + r.Stderr
	}

	if got := fetch("https://example.com:" + portStr + "/hello"); !strings.Contains(got, `STATUS 200`) || !strings.Contains(got, "hello from the allowed host") {
		t.Fatalf("the allowed host: %q", got)
	}
	for url, why := range map[string]string{
		"https://denied.example.org:" + portStr + "/": "matches no allowed host",
		"https://loop.test:" + otherPort + "/":        "internal address",
		"https://10.0.0.1:" + otherPort + "/":         "no rule names",
		"https://example.com:1234/":                   "matches no allowed host",
	} {
		if got := fetch(url); !strings.Contains(got, "ERR") || !strings.Contains(got, "Forbidden") {
			t.Errorf("%s (%s): %q", url, why, got)
		}
	}
	// Still no interface but lo, and the commands have the proxy.
	r := execOK(t, s, name, restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", "ls /sys/class/net; echo $HTTPS_PROXY"})})
	if strings.TrimSpace(r.Stdout) != "lo\nhttp://127.0.0.1:3128" {
		t.Errorf("inside: %q", r.Stdout)
	}
	// A download through the tunnel arrives whole.
	if got := fetch("https://example.com:" + portStr + "/big"); !strings.Contains(got, fmt.Sprintf("STATUS 200 BYTES %d READERR <nil>", len(big))) {
		t.Errorf("8 MiB through the tunnel: %q", got)
	}
	// The environment shows its recent egress, and Prometheus counts it. A
	// tunnel is recorded when the server sees its end, which may come a
	// little after the client has all its bytes (a loaded machine).
	var recent []byte
	if !testkit.Within(patience, func() bool {
		g, err := c.GetEnvironmentWithResponse(ctx, name)
		if err != nil || g.JSON200 == nil || g.JSON200.Egress == nil {
			t.Fatalf("the environment's egress: %v %s", err, g.Body)
		}
		recent = g.Body
		var sawDenied, sawBig bool
		for _, e := range *g.JSON200.Egress {
			sawDenied = sawDenied || (e.Host == "denied.example.org" && !e.Allowed && strings.Contains(deref(e.Reason), "matches no allowed host"))
			sawBig = sawBig || (e.Allowed && e.BytesDown > int64(len(big)))
		}
		return sawDenied && sawBig
	}) {
		t.Errorf("recent egress: %s", recent)
	}
	if _, metrics := fileDo(t, s, http.MethodGet, s.RESTURL+"/metrics", nil); !strings.Contains(string(metrics), `agentic_egress_tunnels_total{allowed="false"}`) ||
		!strings.Contains(string(metrics), `agentic_egress_bytes_total{direction="down"}`) {
		t.Errorf("egress metrics missing")
	}
	// What was refused and allowed is in the server's log.
	if log := s.Log(); !strings.Contains(log, `msg=egress agent_id=`+name+` host=denied.example.org`) || !strings.Contains(log, "allowed=true") {
		t.Errorf("egress not logged:\n%s", log)
	}
	if d, err := c.DeleteEnvironmentWithResponse(ctx, name); err != nil || d.StatusCode() >= 300 {
		t.Errorf("delete: %v", err)
	}
}

// taskThroughTheProxy: a task manifest asks for network_mode proxy with
// its allowed hosts, and its command reaches exactly those.
func taskThroughTheProxy(t *testing.T, s *harness.Server) {
	site := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello, task") }))
	t.Cleanup(site.Close)
	_, port, _ := net.SplitHostPort(site.Listener.Addr().String())
	repo := t.TempDir()
	gitIn(t, repo, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(repo, "egressclient"), egressClient(t), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(repo, "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: site.Certificate().Raw}), 0o644)
	gitIn(t, repo, "add", "-A")
	gitIn(t, repo, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "client")
	testkit.OpenToAll(t, repo)
	e := &taskEnv{t: t, s: s, repo: repo}
	// A rule that is not one is refused at submit, with its path.
	if st, b := e.submit("repository: {url: " + repo + "}\ncommand: {argv: [\"true\"]}\nenvironment: {runtime: docker, network_mode: proxy, allowed_hosts: [\"http://x\"]}\n"); st != http.StatusBadRequest || !strings.Contains(string(b), "allowed_hosts[0]") {
		t.Errorf("a bad rule: %d %s", st, b)
	}
	tk := e.run(`
repository: {url: ` + repo + `}
command: {argv: [sh, -c, "./egressclient https://example.com:` + port + `/ ca.pem; ./egressclient https://other.example.org:` + port + `/ ca.pem; ls /sys/class/net; echo $HTTPS_PROXY"]}
environment: {runtime: docker, network_mode: proxy, allowed_hosts: ["example.com:` + port + `", "127.0.0.1:` + port + `"]}  # the test name resolves to loopback, allowed by address
`)
	if tk.State != "completed" {
		t.Fatalf("task: %s: %s %s", tk.State, deref(tk.Reason), deref(tk.Error))
	}
	var out strings.Builder
	for _, ev := range readSSE(t, s, tk.Id, "") {
		if ev.event == "output" {
			var o struct{ Data string }
			_ = json.Unmarshal([]byte(ev.data), &o)
			out.WriteString(o.Data)
		}
	}
	got := out.String()
	if !strings.Contains(got, "STATUS 200") || !strings.Contains(got, "hello, task") {
		t.Errorf("the allowed host from the task: %q", got)
	}
	if !strings.Contains(got, "Forbidden") || !strings.Contains(got, "other.example.org") {
		t.Errorf("a host the task does not allow: %q", got)
	}
	if !strings.Contains(got, "lo\nhttp://127.0.0.1:3128") {
		t.Errorf("the task's environment: %q", got)
	}
}

// endlessDownload is an HTTPS server whose answer streams for a minute;
// gone closes when a write fails (whoever read it went away), started on
// the first chunk out.
type endlessDownload struct {
	*httptest.Server
	port          string
	started, gone chan struct{}
}

func newEndlessDownload(t *testing.T) *endlessDownload {
	d := &endlessDownload{started: make(chan struct{}, 1), gone: make(chan struct{})}
	var once sync.Once
	d.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		chunk := make([]byte, 64<<10)
		for i := 0; i < 6000; i++ { // a minute at most
			if _, err := w.Write(chunk); err != nil {
				once.Do(func() { close(d.gone) })
				return
			}
			w.(http.Flusher).Flush()
			select {
			case d.started <- struct{}{}:
			default:
			}
			time.Sleep(10 * time.Millisecond)
		}
	}))
	t.Cleanup(d.Close)
	_, d.port, _ = net.SplitHostPort(d.Listener.Addr().String())
	return d
}

var (
	egressClientOnce sync.Once
	egressClientBin  []byte
	egressClientErr  error
)

// egressClient is the static test client, built once.
func egressClient(t *testing.T) []byte {
	t.Helper()
	egressClientOnce.Do(func() {
		dir, err := os.MkdirTemp("", "egressclient-")
		if err != nil {
			egressClientErr = err
			return
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "egressclient")
		root, _ := harness.ModuleRoot()
		build := exec.Command("go", "build", "-o", bin, "./cmd/internal/e2e/testdata/egressclient")
		build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			egressClientErr = fmt.Errorf("%v %s", err, out)
			return
		}
		egressClientBin, egressClientErr = os.ReadFile(bin)
	})
	if egressClientErr != nil {
		t.Fatalf("building the egress client: %v", egressClientErr)
	}
	return egressClientBin
}

// putFile writes a file on an agent through the files API.
func putFile(t *testing.T, s *harness.Server, agent, path string, b []byte, mode string) {
	t.Helper()
	st, body := fileDo(t, s, http.MethodPut, s.RESTURL+"/api/v1/agents/"+agent+"/files/content?path="+path+"&mode="+mode, bytes.NewReader(b))
	if st >= 300 {
		t.Fatalf("upload %s to %s: %d %s", path, agent, st, body)
	}
}

// waitEnvReady waits for an environment to be ready.
func waitEnvReady(t *testing.T, s *harness.Server, name string, d time.Duration) {
	t.Helper()
	eventually(t, d, name+" ready", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		g, err := s.Client().GetEnvironmentWithResponse(ctx, name)
		return err == nil && g.JSON200 != nil && g.JSON200.State == "ready"
	})
}
