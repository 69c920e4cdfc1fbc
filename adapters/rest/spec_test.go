package rest

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestUnknownQueryParametersAreRefused: every operation refuses a query
// parameter it does not declare, before its handler runs.
func TestUnknownQueryParametersAreRefused(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/healthz?x=1", ""},
		{"GET", "/api/v1/agents?limit=1&nope=1", ""},
		{"GET", "/api/v1/agents/a1?verbose=true", ""},
		{"POST", "/api/v1/agents/a1/exec?dry=1", `{"command":"echo"}`},
		{"GET", "/api/v1/commands/c1?stdout_from=0&wait=1", ""},
	} {
		r := e.call(tc.method, tc.path, tc.body)
		expect(t, r, 400, "unknown_parameter")
	}
	if n := len(e.link.Commands()); n != 0 {
		t.Fatalf("%d commands started by refused requests", n)
	}
	// Declared ones pass.
	expect(t, e.call("GET", "/api/v1/agents?limit=1", ""), 200, "")
}

// TestParametersAreHeldToTheSpec: the limits openapi.yaml writes for path,
// query and header parameters are the server's.
func TestParametersAreHeldToTheSpec(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ method, path, code string }{
		{"GET", "/api/v1/agents/" + strings.Repeat("a", 129), "invalid_request"},
		{"GET", "/api/v1/agents/" + strings.Repeat("a", 129) + "/sessions", "invalid_request"},
		{"GET", "/api/v1/sessions?agent_id=" + strings.Repeat("a", 129), "invalid_request"},
		{"GET", "/api/v1/agents?cursor=" + strings.Repeat("c", 1025), "invalid_request"},
		{"GET", "/api/v1/agents/a1/files?path=" + url.QueryEscape("/tmp/"+strings.Repeat("n", 256)), "invalid_path"},
		{"GET", "/api/v1/agents/a1/files?path=" + url.QueryEscape("a\x00b"), "invalid_path"},
		{"GET", "/api/v1/agents/a1/files?path=" + strings.Repeat("/x", 2048), "invalid_path"},
		{"GET", "/api/v1/tasks?state=running,nope", "invalid_request"},
		{"GET", "/api/v1/tasks?label=nokey", "invalid_request"},
	} {
		r := e.call(tc.method, tc.path, "")
		expect(t, r, 400, tc.code)
	}
	// At the limits, the handler answers.
	expect(t, e.call("GET", "/api/v1/agents/"+strings.Repeat("a", 128), ""), 404, "agent_not_found")
}

// TestBodiesAreHeldToTheSpec: a JSON body is checked against its schema in
// openapi.yaml beyond its Go type: nulls, patterns, ranges, lengths.
func TestBodiesAreHeldToTheSpec(t *testing.T) {
	e := newEnv(t)
	for _, body := range []string{
		`{"command":"echo","args":null}`,
		`{"command":"echo","cols":null}`,
		`{"command":"echo","zz":1}`,
		`{"command":"echo","working_dir":"a\u0000b"}`,
		`{"command":""}`,
	} {
		expect(t, e.call("POST", "/api/v1/agents/a1/exec", body), 400, "invalid_request")
	}
	expect(t, e.call("POST", "/api/v1/commands/c1/signal", `{"signal":"!!"}`), 400, "invalid_request")
	expect(t, e.call("POST", "/api/v1/commands/c1/stdin", `{"data_base64":"abc"}`), 400, "invalid_request")
	if n := len(e.link.Commands()); n != 0 {
		t.Fatalf("%d commands started by refused requests", n)
	}
}

// TestIdempotencyKeyIsPrintableASCII: createTask's Idempotency-Key is at
// most 128 printable ASCII characters, so the spec's limit (characters)
// and the server's (bytes) are one. TestSpecFuzz (seeds 4242, 31337) sent
// the first key: 128 characters and 129 bytes, which the spec allowed
// and the server refused.
func TestIdempotencyKeyIsPrintableASCII(t *testing.T) {
	e := newEnv(t)
	send := func(key string) response {
		t.Helper()
		req, err := http.NewRequest("POST", e.srv.URL+"/api/v1/tasks", strings.NewReader(`{"manifest":{}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Idempotency-Key", key)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		checkContract(t, req, resp.StatusCode, resp.Header, b)
		return response{status: resp.StatusCode, header: resp.Header, body: b}
	}
	// The spec's verdict on a key: the schema of the parameter.
	param := loadSpec(t).Paths.Find("/api/v1/tasks").Post.Parameters.GetByInAndName("header", "Idempotency-Key")
	if param == nil {
		t.Fatal("createTask declares no Idempotency-Key")
	}
	for _, key := range []string{
		"QKs3OQw\u00e9Y" + strings.Repeat("a", 119),
		strings.Repeat("\u00e9", 10),
		"tab\there",
		strings.Repeat("k", 129),
	} {
		expect(t, send(key), 400, "invalid_request")
		if param.Schema.Value.VisitJSON(key) == nil {
			t.Errorf("openapi.yaml allows the Idempotency-Key %q the server refuses", key)
		}
	}
	// At the limit, and every printable character: the handler answers.
	for _, key := range []string{strings.Repeat("k", 128), " !\"#$%&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~"} {
		if r := send(key); r.status == 400 {
			t.Errorf("Idempotency-Key %q: %d %s", key, r.status, r.body)
		}
		if err := param.Schema.Value.VisitJSON(key); err != nil {
			t.Errorf("openapi.yaml refuses the Idempotency-Key %q: %v", key, err)
		}
	}
}
