package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/rest/resttest"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/apicontract"
	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

const (
	testToken = "s3cret-operator-token"
	// testExecToken is the executor token the fake aiwg link holds.
	testExecToken = "s3cret-executor-token"
)

func loadSpec(t testing.TB) *openapi3.T {
	t.Helper()
	doc, _, err := apicontract.Spec()
	if err != nil {
		t.Fatalf("loading openapi.yaml: %v", err)
	}
	return doc
}

// checkContract validates one response against openapi.yaml: a declared
// status, a body matching its schema, and for every error the JSON Error
// shape with a snake_case code. Every test request goes through it.
func checkContract(t testing.TB, req *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	for _, tok := range []string{testToken, testExecToken} {
		if bytes.Contains(body, []byte(tok)) {
			t.Errorf("%s %s: response echoes a token", req.Method, req.URL.Path)
		}
	}
	if status >= 500 && status != http.StatusBadGateway && status != http.StatusServiceUnavailable && status != http.StatusInsufficientStorage {
		t.Errorf("%s %s: server error %d: %s", req.Method, req.URL.Path, status, body)
	}
	if err := apicontract.CheckResponse(req, status, header, body); err != nil {
		t.Error(err)
	}
}

// missionEpoch stamps the fake missions: it has nanoseconds, so the
// millisecond rendering of estimated_start is put to the test.
var missionEpoch = time.Date(2026, 5, 9, 7, 13, 22, 123456789, time.UTC)

// env is a REST server on a fake link, reached over real HTTP, with a fake
// mission service and a configured, registered fake aiwg link.
type env struct {
	t        *testing.T
	link     *resttest.Link
	missions *resttest.Missions
	exec     *resttest.Executor
	clock    *portsfake.Clock
	srv      *httptest.Server
	logs     *testkit.Buffer
}

func newEnv(t *testing.T, edit ...func(*Deps)) *env {
	t.Helper()
	link := resttest.NewLink()
	link.AddAgent(ports.AgentInfo{ID: "a1", Status: "ready", Runtime: "host", Hostname: "h1"})
	link.AddAgent(ports.AgentInfo{ID: "off", Status: "disconnected", Runtime: "vm", Hostname: "h2"})
	clock := portsfake.NewClock(time.Date(2026, 5, 9, 7, 13, 22, 0, time.UTC))
	var logs testkit.Buffer
	missions := resttest.NewMissions(link)
	missions.SetNow(func() time.Time { return missionEpoch })
	exec := resttest.NewExecutor("exec-1", testExecToken)
	d := Deps{
		Missions: missions,
		Executor: exec,
		Link:     link,
		Agents:   link,
		Token:    testToken,
		Version:  "1.2.3",
		Logger:   slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Clock:    clock,
	}
	signIns := portsfake.NewSignInSessions()
	signIns.Now = clock.Now
	d.SignIns = signin.NewSessions(signIns, testToken)
	for _, f := range edit {
		if f != nil { // a table's case without an edit
			f(&d)
		}
	}
	srv := httptest.NewServer(New(d).Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		if out := logs.String(); strings.Contains(out, testToken) || strings.Contains(out, testExecToken) {
			t.Errorf("a token appears in the log")
		}
	})
	return &env{t: t, link: link, missions: missions, exec: exec, clock: clock, srv: srv, logs: &logs}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %s: %v", apicontract.Clip(r.body), err)
	}
}

func (r response) code(t testing.TB) string {
	t.Helper()
	var e restapi.Error
	r.decode(t, &e)
	return e.Code
}

// call sends a request with the operator token.
func (e *env) call(method, path, body string) response {
	e.t.Helper()
	return e.callCtx(context.Background(), method, path, body, "Bearer "+testToken)
}

// callAuth sends a request with the given Authorization header ("" = none).
func (e *env) callAuth(method, path, body, auth string) response {
	e.t.Helper()
	return e.callCtx(context.Background(), method, path, body, auth)
}

func (e *env) callCtx(ctx context.Context, method, path, body, auth string) response {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	checkContract(e.t, req, resp.StatusCode, resp.Header, b)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// expect fails unless r has the status (and, for errors, the code).
func expect(t testing.TB, r response, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, apicontract.Clip(r.body))
	}
	if code != "" {
		if got := r.code(t); got != code {
			t.Fatalf("code %q, want %q: %s", got, code, apicontract.Clip(r.body))
		}
	}
}

// nextCommand waits for the fake link to start a command.
func (e *env) nextCommand() *resttest.Command {
	e.t.Helper()
	return testkit.Receive(e.t, 15*time.Second, e.link.Started(), "no command was started")
}

// TestEveryBodyRouteIsCheckedStrictly: every JSON body is vetted before the
// generated decoder sees it; dispatch by its own rules (unknown fields pass);
// uploads stream, bounded by the file maximum; a task's manifest is YAML
// or JSON, read by createTask.
func TestEveryBodyRouteIsCheckedStrictly(t *testing.T) {
	doc := loadSpec(t)
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.RequestBody == nil {
				continue
			}
			if _, ok := bodyTypes[method+" "+path]; !ok && method+" "+path != dispatchRoute && !uploadRoutes[method+" "+path] && method+" "+path != createTaskRoute && method+" "+path != signInRoute {
				t.Errorf("%s %s takes a body but checkBody does not know it", method, path)
			}
		}
	}
}

// TestEveryOperationDeclaresTheSharedAnswers: the answers any handler can
// give whatever it does (400 for a query parameter it does not declare or
// a parameter its schema refuses, 401 without a token, 413 for a body too
// large) are declared by every operation they apply to.
func TestEveryOperationDeclaresTheSharedAnswers(t *testing.T) {
	doc := loadSpec(t)
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			want := []string{"400"}
			if op.Security == nil || len(*op.Security) > 0 {
				want = append(want, "401")
			}
			if op.RequestBody != nil {
				want = append(want, "413")
			}
			for _, status := range want {
				if op.Responses.Value(status) == nil {
					t.Errorf("%s %s does not declare %s", method, path, status)
				}
			}
		}
	}
}

// TestEveryErrorCodeIsDocumented: each code a handler can answer is in the
// spec's list of Error codes, so clients can rely on the list.
func TestEveryErrorCodeIsDocumented(t *testing.T) {
	doc := loadSpec(t)
	listed := doc.Components.Schemas["Error"].Value.Properties["code"].Value.Description
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`(?:newError\(http\.\w+|writeError\(w, http\.\w+), "([a-z_]+)"`)
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range used.FindAllStringSubmatch(string(src), -1) {
			found++
			if !regexp.MustCompile(`\b` + m[1] + `\b`).MatchString(listed) {
				t.Errorf("%s answers code %q, which openapi.yaml's Error does not list", f, m[1])
			}
		}
	}
	if found < 20 {
		t.Fatalf("found only %d codes: the pattern no longer matches the handlers", found)
	}
}
