package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// envJSON is an environment as the REST API answers it, the fields the
// sleep and wake tests read.
type envJSON struct {
	Name             string `json:"name"`
	State            string `json:"state"`
	Error            string `json:"error"`
	Hibernate        string `json:"hibernate"`
	SavedBytes       int64  `json:"saved_bytes"`
	SleepReason      string `json:"sleep_reason"`
	HibernatedAt     string `json:"hibernated_at"`
	LastActivityKind string `json:"last_activity_kind"`
	Events           []struct {
		Step    string `json:"step"`
		Message string `json:"message"`
	} `json:"events"`
}

// envCall sends method to /api/v1/environments/{name}{suffix} as the
// operator and decodes the environment it answers.
func envCall(t *testing.T, s *harness.Server, method, name, suffix, body string) (int, envJSON, []byte) {
	t.Helper()
	ct := ""
	if body != "" {
		ct = "application/json"
	}
	st, _, b := restDo(t, s, method, "/api/v1/environments/"+name+suffix, ct, body, func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+s.Token)
	})
	var e envJSON
	_ = json.Unmarshal(b, &e)
	return st, e, b
}

// waitEnv waits until name is in state want, and returns it.
func waitEnv(t *testing.T, s *harness.Server, name, want string) envJSON {
	t.Helper()
	var e envJSON
	var body []byte
	if !testkit.Within(patience, func() bool {
		_, e, body = envCall(t, s, "GET", name, "", "")
		return e.State == want
	}) {
		t.Fatalf("%s: state %q, want %q: %s", name, e.State, want, body)
	}
	return e
}

// execOut runs sh -c script in name's environment and returns its stdout;
// a non-zero exit fails the test.
func execOut(t *testing.T, s *harness.Server, name, script string) string {
	t.Helper()
	r := execOK(t, s, name, restapi.ExecRequest{Command: "sh", Args: ptr([]string{"-c", script})})
	if r.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d: %s %s", script, r.ExitCode, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

// counter reads the counter file the background session writes.
func counter(t *testing.T, s *harness.Server, name string) int {
	t.Helper()
	out := strings.TrimSpace(execOut(t, s, name, "cat /tmp/counter"))
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("counter %q: %v", out, err)
	}
	return n
}

// qemuOf reports whether a QEMU process runs the domain of environment name.
func qemuOf(t *testing.T, name string) bool {
	t.Helper()
	out, _ := exec.Command("pgrep", "-af", "qemu-system").Output()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "guest="+name) || strings.Contains(l, name+",") || strings.Contains(l, "-"+name+" ") {
			return true
		}
	}
	return false
}

// A VM hibernates with its memory and wakes where it was: a background
// session writing a counter every 100 ms and a small HTTP server inside
// go on after a restart of agentic-mgmt and a wake by an exec; the session's
// log has no gap and no duplicate, and the agent comes back as itself. A
// wake the host fails leaves it hibernated with the reason, also after a
// restart. Its saved state corrupted, a wake leaves it failed with the
// reason.
func TestAVMHibernatesWithItsMemoryAndWakesWhereItWas(t *testing.T) {
	name := fmt.Sprintf("sleepy-%d", time.Now().UnixNano()%100000)
	s := startLibvirtServer(t)
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", name) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mem := 512
	created, err := s.Client().CreateEnvironmentWithResponse(ctx, restapi.CreateEnvironmentRequest{Runtime: "libvirt", Name: name,
		Resources: &restapi.Resources{MemoryMb: &mem}})
	if err != nil || created.JSON202 == nil {
		t.Fatalf("create: %v %s", err, created.Body)
	}
	e := waitEnv(t, s, name, "ready")
	if e.Hibernate != "memory" {
		t.Fatalf("the libvirt runtime's environment says hibernate %q, want memory", e.Hibernate)
	}
	bg := restapi.SessionBackground
	sess := createSession(t, s, name, restapi.CreateSessionRequest{Type: &bg, Name: ptr("counter"), Command: "sh",
		Args: ptr([]string{"-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/counter; echo n$i; sleep 0.1; done"})})
	execOut(t, s, name, "mkdir -p /tmp/www && echo still-serving > /tmp/www/index.html && (busybox httpd -p 127.0.0.1:8000 -h /tmp/www &) && sleep 0.2")
	if got := execOut(t, s, name, "busybox wget -qO- http://127.0.0.1:8000/"); !strings.Contains(got, "still-serving") {
		t.Fatalf("the HTTP server inside does not answer: %q", got)
	}
	if !testkit.Within(patience, func() bool { return counter(t, s, name) >= 10 }) {
		t.Fatal("the counter does not count")
	}

	st, e, body := envCall(t, s, "POST", name, "/hibernate", "")
	if st != 200 || e.State != "hibernated" || e.SavedBytes <= 0 || e.SleepReason != "requested" {
		t.Fatalf("hibernate: %d %s", st, body)
	}
	if qemuOf(t, name) {
		t.Fatal("the guest's QEMU process still runs: its memory is still held")
	}

	// agentic-mgmt restarts meanwhile: the environment is still hibernated.
	stop(t, s)
	s = restart(t, s)
	// Cleanups run last first: this rm runs while the restarted server
	// still does (the first one's runs after it was killed, and left the
	// domain of a failed run defined).
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", name) })
	e = waitEnv(t, s, name, "hibernated")
	if e.SavedBytes <= 0 {
		t.Fatalf("after a restart the saved state's size is unknown: %+v", e)
	}

	// Woken by an exec: the counter goes on from where it was.
	first := counter(t, s, name)
	if first < 10 {
		t.Fatalf("the counter started again: %d", first)
	}
	if e := waitEnv(t, s, name, "ready"); !hasStep(e, "woke") {
		t.Fatalf("no woke event: %+v", e.Events)
	}
	if !testkit.Within(patience, func() bool { return counter(t, s, name) > first+5 }) {
		t.Fatal("the counter stopped after the wake")
	}
	if got := execOut(t, s, name, "busybox wget -qO- http://127.0.0.1:8000/"); !strings.Contains(got, "still-serving") {
		t.Fatalf("the HTTP server inside does not answer after the wake: %q", got)
	}
	if got := strings.TrimSpace(execOut(t, s, name, "echo $AGENT_ID")); got != name {
		t.Fatalf("the agent came back as %q", got)
	}
	agent, err := s.Client().GetAgentWithResponse(ctx, name)
	if err != nil || agent.JSON200 == nil || (agent.JSON200.Status != restapi.Ready && agent.JSON200.Status != restapi.Busy) {
		t.Fatalf("agent after the wake: %v %s", err, agent.Body)
	}

	// Woken by a preview request: the HTTP server inside answers it.
	hibernated(t, s, name)
	st, _, b := restDo(t, s, "GET", "/preview/"+name+"/8000/", "", "", func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+s.Token)
	})
	if st != 200 || !strings.Contains(string(b), "still-serving") {
		t.Fatalf("a preview request to a hibernated VM: %d %s", st, b)
	}
	wokeBy(t, s, name, "preview")

	// Woken by a viewer joining the session over /ws: it sees the counter go on.
	hibernated(t, s, name)
	v := dialWS(t, s, s.Token)
	v.send(map[string]any{"type": "join_session", "session_id": sess.SessionId, "role": "observer"})
	// The join answers once the wake it caused is over; only then an exec.
	v.waitFor("joined", func(f map[string]any) bool { return f["type"] == "role_changed" })
	before := counter(t, s, name)
	v.waitOutput(sess.SessionId, regexp.MustCompile(fmt.Sprintf(`n%d\r?\n`, before+3)))
	v.ws.Close()
	wokeBy(t, s, name, "viewer")

	// The session's log: every number once, in order.
	sessionCountsOnFrom(t, s, sess.SessionId, first)

	// The host failing the restore (QEMU cannot bind its channel socket:
	// a directory is in the way) with a sound saved state: the wake fails,
	// saying why, and the environment stays hibernated, its save kept and
	// its domain defined, shut off; the next wake works.
	hibernated(t, s, name)
	saved := savedStateOf(t, s, name)
	sock := filepath.Join(filepath.Dir(saved), "agent.sock")
	_ = os.Remove(sock)
	if err := os.MkdirAll(filepath.Join(sock, "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Three callers at once: every one is told of the failure.
	const wakers = 3
	answers := make(chan string, wakers)
	for range wakers {
		go func() {
			st, _, body := restDo(t, s, "POST", "/api/v1/environments/"+name+"/wake", "", "", func(r *http.Request) {
				r.Header.Set("Authorization", "Bearer "+s.Token)
			})
			answers <- fmt.Sprintf("%d %s", st, body)
		}()
	}
	for range wakers {
		if a := testkit.Receive(t, patience, answers, "a wake"); !strings.HasPrefix(a, "503 ") || !strings.Contains(a, "wake_failed") {
			t.Fatalf("wake with its channel socket blocked: %s", a)
		}
	}
	_, e, body = envCall(t, s, "GET", name, "", "")
	if e.State != "hibernated" || !strings.HasPrefix(e.Error, "wake: ") || e.SavedBytes <= 0 || !hasStep(e, "wake_failed") {
		t.Fatalf("after a wake the host failed: %s", body)
	}
	// (How many wakes they made depends on whether they overlapped: the
	// failure takes milliseconds. That overlapping callers share one wake
	// is TestAWakeThatFailsOnTheHostSideLeavesItHibernatedForTheNextWake's.)
	t.Logf("%d callers at once made %d wakes", wakers, wakesSinceHibernated(e))
	t.Logf("a wake the host failed: %s", e.Error)
	if _, err := os.Stat(saved); err != nil {
		t.Fatalf("the saved state is gone after a wake the host failed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(saved), "hibernate.lost")); !os.IsNotExist(err) {
		t.Fatalf("a wake the host failed marked the saved state lost: %v", err)
	}
	if st := domainState(t, name); st != "shut off" {
		t.Fatalf("after a wake the host failed the domain is %q, want shut off", st)
	}
	// agentic-mgmt killed (nothing written at its exit) and started again:
	// the record still says why the last wake failed, and why it sleeps.
	s.Kill()
	s = restart(t, s)
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", name) })
	if again := waitEnv(t, s, name, "hibernated"); again.Error != e.Error || again.SleepReason != "requested" || again.SavedBytes <= 0 {
		t.Fatalf("after a restart the failed wake's record says %q (asleep: %q, %d bytes), want %q", again.Error, again.SleepReason, again.SavedBytes, e.Error)
	}
	if err := os.RemoveAll(sock); err != nil {
		t.Fatal(err)
	}
	if st, e, body := envCall(t, s, "POST", name, "/wake", ""); st != 200 || e.State != "ready" || e.Error != "" {
		t.Fatalf("the wake after the host's failure: %d %s", st, body)
	}
	if got := strings.TrimSpace(execOut(t, s, name, "echo $AGENT_ID")); got != name {
		t.Fatalf("the agent came back as %q", got)
	}

	// A saved state sound by its checksums that QEMU refuses (its stream's
	// magic garbled, the record's checksum made to match): the restore
	// proves it bad, the environment is failed with the reason.
	hibernated(t, s, name)
	refusedStream(t, saved)
	e = wakeLeavesFailed(t, s, name, "wake of a saved state QEMU refuses", "saved state", "restore")
	t.Logf("a wake QEMU refused: %s", e.Error)
	if st := domainState(t, name); st != "shut off" {
		t.Fatalf("after a restore QEMU refused the domain is %q, want shut off", st)
	}
	// Started, it boots afresh.
	if st, _, body := envCall(t, s, "POST", name, "/start", ""); st >= 300 {
		t.Fatalf("start after a lost saved state: %d %s", st, body)
	}
	waitEnv(t, s, name, "ready")

	// A corrupted saved state: the wake fails, saying why.
	if st, e, body := envCall(t, s, "POST", name, "/hibernate", ""); st != 200 || e.State != "hibernated" {
		t.Fatalf("second hibernate: %d %s", st, body)
	}
	saved = savedStateOf(t, s, name)
	if err := os.WriteFile(saved, []byte("not a saved guest"), 0o600); err != nil {
		t.Fatal(err)
	}
	e = wakeLeavesFailed(t, s, name, "wake of a corrupted saved state", "saved state")
	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "rm", name); code != 0 {
		t.Fatalf("rm: %q %q", out, errOut)
	}
	if _, err := os.Stat(saved); !os.IsNotExist(err) {
		t.Fatalf("the saved state outlived its environment: %v", err)
	}
	if st := domainState(t, name); st != "" {
		t.Fatalf("the domain of a removed environment is left, %s", st)
	}
}

// domainState is the state virsh says environment name's domain is in on
// the machine's libvirtd, "" when it has no such domain.
func domainState(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("virsh", "-c", "qemu:///system", "domstate", "agentic-"+name).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "failed to get domain") {
			return ""
		}
		t.Fatalf("virsh domstate agentic-%s: %v %s", name, err, out)
	}
	return strings.TrimSpace(string(out))
}

// wakesSinceHibernated counts the wakes begun since e last hibernated.
func wakesSinceHibernated(e envJSON) int {
	n := 0
	for _, ev := range e.Events {
		switch ev.Step {
		case "hibernated":
			n = 0
		case "waking":
			n++
		}
	}
	return n
}

// wakeLeavesFailed wakes name, which must answer 503 wake_failed and leave
// the environment failed with an error mentioning each of mentions; what
// names the case in a failure.
func wakeLeavesFailed(t *testing.T, s *harness.Server, name, what string, mentions ...string) envJSON {
	t.Helper()
	st, _, body := envCall(t, s, "POST", name, "/wake", "")
	if st != 503 || !strings.Contains(string(body), "wake_failed") {
		t.Fatalf("%s: %d %s", what, st, body)
	}
	e := waitEnv(t, s, name, "failed")
	for _, m := range mentions {
		if !strings.Contains(e.Error, m) {
			t.Fatalf("%s: the error %q does not mention %q", what, e.Error, m)
		}
	}
	return e
}

// refusedStream garbles the magic of the QEMU stream in the saved state
// at path and makes its record's checksum match: a file the checks take
// and QEMU refuses.
func refusedStream(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte("QEVM"))
	if i < 0 {
		t.Fatalf("no QEMU stream in %s", path)
	}
	copy(b[i:], "XXXX")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	recPath := filepath.Join(filepath.Dir(path), "hibernate.json")
	raw, err := os.ReadFile(recPath)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	if head, _ := rec["head_bytes"].(float64); int(head) > i {
		t.Fatalf("the stream's magic at %d is inside the checked head (%v bytes)", i, head)
	}
	rec["crc32c"] = crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
	raw, _ = json.Marshal(rec)
	if err := os.WriteFile(recPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

func hasStep(e envJSON, step string) bool {
	for _, ev := range e.Events {
		if ev.Step == step {
			return true
		}
	}
	return false
}

// savedStateOf finds the file holding a hibernated VM's memory under the
// server's data dir.
func savedStateOf(t *testing.T, s *harness.Server, name string) string {
	t.Helper()
	var found string
	_ = filepath.Walk(s.Opts.DataDir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && strings.Contains(p, name) && strings.HasSuffix(p, ".save") {
			found = p
		}
		return nil
	})
	if found == "" {
		t.Fatalf("no saved state of %s under %s", name, s.Opts.DataDir)
	}
	return found
}

// startDockerSleeper runs the server with the Docker runtime on a private
// dockerd.
func startDockerSleeper(t *testing.T) *harness.Server {
	t.Helper()
	host := privateDockerd(t)
	return startServer(t, 0, t.TempDir(), "DOCKER_HOST="+host, "AGENTIC_RUNTIMES=docker")
}

// createReady creates an environment on runtime with the request's extra
// JSON fields and waits until it is ready.
func createReady(t *testing.T, s *harness.Server, runtime, name, extra string) envJSON {
	t.Helper()
	body := fmt.Sprintf(`{"runtime":%q,"name":%q%s}`, runtime, name, extra)
	st, _, b := restDo(t, s, "POST", "/api/v1/environments", "application/json", body, func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+s.Token)
	})
	if st != 202 {
		t.Fatalf("create %s: %d %s", name, st, b)
	}
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", name) })
	return waitEnv(t, s, name, "ready")
}

// hibernated hibernates name and checks it says so.
func hibernated(t *testing.T, s *harness.Server, name string) envJSON {
	t.Helper()
	st, e, body := envCall(t, s, "POST", name, "/hibernate", "")
	if st != 200 || e.State != "hibernated" {
		t.Fatalf("hibernate %s: %d %s", name, st, body)
	}
	return e
}

// wokeBy checks that name is ready again, woken by a use of kind, once
// since its last hibernation.
func wokeBy(t *testing.T, s *harness.Server, name, kind string) {
	t.Helper()
	e := waitEnv(t, s, name, "ready")
	wakes, woke, by := 0, false, ""
	for _, ev := range e.Events {
		switch ev.Step {
		case "hibernated":
			wakes, woke, by = 0, false, ""
		case "waking":
			wakes++
			by = ev.Message
		case "woke":
			woke = true
		}
	}
	if wakes != 1 || !woke || by != "by "+kind {
		t.Fatalf("%s: %d wakes since it hibernated (woke %v, %q), want one by %s: %+v", name, wakes, woke, by, kind, e.Events)
	}
}

// Every entry point aimed at a hibernated container wakes it and then
// proceeds: an exec, a file read, a session created, and eight execs at
// once (one wake for all). On a dockerd without checkpoints (hibernate
// filesystem).
func TestWakeOnUseInDocker(t *testing.T) {
	wakeOnUseInDocker(t, startDockerSleeper(t), "filesystem")
}

// The same on a dockerd that checkpoints (hibernate memory): every entry
// point waits for a CRIU restore and its agent's return.
func TestWakeOnUseInDockerWithItsMemory(t *testing.T) {
	host, _ := checkpointDockerd(t)
	s := startServer(t, 0, t.TempDir(), "DOCKER_HOST="+host, "AGENTIC_RUNTIMES=docker")
	waitHibernateCapability(t, s, "memory")
	wakeOnUseInDocker(t, s, "memory")
}

func wakeOnUseInDocker(t *testing.T, s *harness.Server, mode string) {
	name := fmt.Sprintf("wou-%d", time.Now().UnixNano()%100000)
	e := createReady(t, s, "docker", name, "")
	if e.Hibernate != mode {
		t.Fatalf("a Docker environment says hibernate %q, want %s", e.Hibernate, mode)
	}
	execOut(t, s, name, "echo kept > /tmp/kept")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()

	hibernated(t, s, name)
	if got := execOut(t, s, name, "cat /tmp/kept"); strings.TrimSpace(got) != "kept" {
		t.Fatalf("after a wake by exec the file holds %q", got)
	}
	wokeBy(t, s, name, "exec")

	hibernated(t, s, name)
	st, _, b := restDo(t, s, "GET", "/api/v1/agents/"+name+"/files/content?path=/tmp/kept", "", "", func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+s.Token)
	})
	if st != 200 || strings.TrimSpace(string(b)) != "kept" {
		t.Fatalf("file read of a hibernated environment: %d %s", st, b)
	}
	wokeBy(t, s, name, "files")

	hibernated(t, s, name)
	bg := restapi.SessionBackground
	sess := createSession(t, s, name, restapi.CreateSessionRequest{Type: &bg, Name: ptr("woken"), Command: "sh", Args: ptr([]string{"-c", "echo session-ran"})})
	out, _ := followSSE(t, s, sess.SessionId)
	if !strings.Contains(string(out), "session-ran") {
		t.Fatalf("a session created on a hibernated environment: %q", out)
	}
	wokeBy(t, s, name, "session")

	hibernated(t, s, name)
	const callers = 8
	errs := make(chan error, callers)
	for i := range callers {
		go func() {
			r, err := s.Client().ExecCommandWithResponse(ctx, name, restapi.ExecRequest{Command: "echo", Args: ptr([]string{fmt.Sprint("caller-", i)})})
			switch {
			case err != nil:
				errs <- err
			case r.JSON200 == nil || !strings.Contains(r.JSON200.Stdout, fmt.Sprint("caller-", i)):
				errs <- fmt.Errorf("caller %d: %d %s", i, r.StatusCode(), r.Body)
			default:
				errs <- nil
			}
		}()
	}
	for range callers {
		if err := testkit.Receive(t, patience, errs, "a concurrent exec"); err != nil {
			t.Fatal(err)
		}
	}
	wokeBy(t, s, name, "exec")
}

// The idle policy: an environment nobody uses hibernates after idle_after
// (saying why), one with a viewer attached does not until the viewer
// leaves, and one asleep past delete_after is deleted.
func TestIdlePolicyInDocker(t *testing.T) {
	s := startDockerSleeper(t)
	suffix := time.Now().UnixNano() % 100000
	idle, watched, doomed := fmt.Sprintf("idle-%d", suffix), fmt.Sprintf("watched-%d", suffix), fmt.Sprintf("doomed-%d", suffix)
	createReady(t, s, "docker", watched, `,"idle_after":"2s"`)
	// The viewer: a shell over /ws that prints nothing.
	v := dialWS(t, s, s.Token)
	v.send(map[string]any{"type": "start_shell", "id": "1", "agent_id": watched, "cols": 80, "rows": 24})
	v.waitFor("session_started", func(f map[string]any) bool { return f["type"] == "session_started" })
	createReady(t, s, "docker", idle, `,"idle_after":"2s"`)
	createReady(t, s, "docker", doomed, `,"idle_after":"1s","delete_after":"2s"`)

	e := waitEnv(t, s, idle, "hibernated")
	if e.SleepReason != "idle for 2s" {
		t.Fatalf("sleep reason %q", e.SleepReason)
	}
	if !testkit.Within(patience, func() bool {
		st, _, _ := envCall(t, s, "GET", doomed, "", "")
		return st == 404
	}) {
		t.Fatal("an environment asleep past its delete_after was not deleted")
	}
	// The watched one was idle as long as the others, and is awake.
	if _, e, _ := envCall(t, s, "GET", watched, "", ""); e.State != "ready" {
		t.Fatalf("an environment with a viewer attached is %s", e.State)
	}
	v.ws.Close()
	if e := waitEnv(t, s, watched, "hibernated"); e.SleepReason != "idle for 2s" {
		t.Fatalf("sleep reason %q", e.SleepReason)
	}
}

// sessionCountsOnFrom kills the counter session and checks its whole log:
// no gap, every number once and in order, past first (the counter read
// after the wake).
func sessionCountsOnFrom(t *testing.T, s *harness.Server, sessionID string, first int) {
	t.Helper()
	ctx, cancel := ctxFor(patience)
	defer cancel()
	if r, err := s.Client().KillSessionWithResponse(ctx, sessionID); err != nil || r.StatusCode() >= 300 {
		t.Fatalf("kill the session: %v %v", err, r)
	}
	out, err := s.Client().GetSessionOutput(ctx, sessionID, &restapi.GetSessionOutputParams{From: ptr(int64(0))})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if out.Header.Get("X-Output-Gap") != "false" {
		t.Fatalf("the session's log has a gap: %v", out.Header)
	}
	prev := 0
	for _, f := range strings.Fields(strings.ReplaceAll(string(raw), "\r", "")) {
		n, err := strconv.Atoi(strings.TrimPrefix(f, "n"))
		if err != nil || !strings.HasPrefix(f, "n") {
			continue
		}
		if n != prev+1 {
			t.Fatalf("the session's log goes from %d to %d", prev, n)
		}
		prev = n
	}
	if prev <= first {
		t.Fatalf("the session's log ends at %d, before the counter read after the wake (%d)", prev, first)
	}
}
