package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/tlsca"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// injectN is how many requests of each kind each path makes: the
// injecting path's share (2·injectN and a warm-up) stays within an
// environment's default rate bound (600 a minute, a burst of as many).
const injectN = 250

// injectBench (issue 31): a message request, plain and streamed, from a
// host-runtime task whose ANTHROPIC_API_KEY is injected, through
// $ANTHROPIC_BASE_URL (agent endpoint → agent link → server adds the key
// → TLS to the API), beside the same request straight to the API from
// the same process, interleaved. The API is a local TLS fake (a CA of its
// own, SSL_CERT_FILE; api.anthropic.com pinned by AGENTIC_TEST_RESOLVE).
func injectBench(bins harness.Binaries) error {
	dataDir, err := os.MkdirTemp("", "agentic-bench-inject-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dataDir)
	repoDir, err := os.MkdirTemp("", "agentic-bench-injectrepo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(repoDir)
	ca, err := tlsca.Open(filepath.Join(dataDir, "ca"), []string{"api.anthropic.com"}, time.Now)
	if err != nil {
		return err
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var conns atomic.Int64 // the connections the API accepted: both paths keep theirs
	var reqs atomic.Int64
	handler := func(w http.ResponseWriter, r *http.Request) { reqs.Add(1); fakeMessages(w, r) }
	api := &http.Server{Handler: http.HandlerFunc(handler), ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}}
	go func() { _ = api.Serve(tls.NewListener(tcp, ca.TLSConfig())) }()
	defer api.Close()
	_, port, _ := net.SplitHostPort(tcp.Addr().String())

	// The repository: the client and the API's CA.
	repo := filepath.Join(repoDir, "repo")
	if out, err := exec.Command("git", "init", "-q", "-b", "main", repo).CombinedOutput(); err != nil {
		return fmt.Errorf("git: %v %s", err, out)
	}
	root, err := harness.ModuleRoot()
	if err != nil {
		return err
	}
	build := exec.Command("go", "build", "-o", filepath.Join(repo, "injectbench"), "./cmd/internal/benchrun/injectbench")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the client: %v %s", err, out)
	}
	pem, err := os.ReadFile(ca.CAPath())
	if err != nil {
		return err
	}
	caFile := filepath.Join(dataDir, "api-ca.pem")
	for _, f := range []string{filepath.Join(repo, "ca.pem"), caFile} {
		if err := os.WriteFile(f, pem, 0o644); err != nil {
			return err
		}
	}
	if out, err := exec.Command("sh", "-c", "cd "+repo+" && git add -A && git -c user.name=b -c user.email=b@x commit -q -m client").CombinedOutput(); err != nil {
		return fmt.Errorf("git: %v %s", err, out)
	}

	serverDir := filepath.Join(dataDir, "server")
	srv, err := harness.Start(bins, harness.Options{DataDir: serverDir, Env: []string{
		"AGENTIC_RUNTIMES=host", "AGENTIC_TASK_RUNTIME=host", "AGENTIC_TASK_REPO_DIRS=" + repoDir,
		"SSL_CERT_FILE=" + caFile, "AGENTIC_TEST_RESOLVE=api.anthropic.com=127.0.0.1", "BENCH_INJECT_KEY=sk-ant-bench",
	}})
	if err != nil {
		return err
	}
	// After the server: the task's environment agent outlives it by design.
	defer harness.KillHostAgents(serverDir)
	defer srv.Kill()
	manifest := `repository: {url: ` + repo + `}
command: {argv: [./injectbench, "` + strconv.Itoa(injectN) + `", "127.0.0.1:` + port + `", ca.pem]}
environment: {runtime: host}
lifecycle: {artifact_patterns: [bench.txt]}
secrets:
  - {name: ANTHROPIC_API_KEY, source: env, key: BENCH_INJECT_KEY, inject: {host: "api.anthropic.com:` + port + `", header: x-api-key}}
`
	_, tk, err := runTask(srv, manifest)
	if err != nil {
		return err
	}
	req, _ := http.NewRequest(http.MethodGet, srv.RESTURL+"/api/v1/tasks/"+tk.Id+"/artifacts/bench.txt", nil)
	req.Header.Set("Authorization", "Bearer "+srv.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench.txt: %d %s", resp.StatusCode, b)
	}
	// path kind → total and first-event times.
	total, first := map[string][]time.Duration{}, map[string][]time.Duration{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			return fmt.Errorf("bench.txt: %q", line)
		}
		t, _ := strconv.Atoi(f[2])
		e, _ := strconv.Atoi(f[3])
		total[f[0]+" "+f[1]] = append(total[f[0]+" "+f[1]], time.Duration(t)*time.Microsecond)
		first[f[0]+" "+f[1]] = append(first[f[0]+" "+f[1]], time.Duration(e)*time.Microsecond)
	}
	fmt.Printf("\n## Injected secrets: a message request through the injecting path vs direct (host runtime, HTTPS to a local fake API)\n\n")
	fmt.Println("| measurement | n | p50 | p99 | mean |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	rows := []stats{
		summarize("plain request, direct", total["direct plain"]),
		summarize("plain request, injected (agent endpoint → server → API)", total["via plain"]),
		summarize("streamed: first event, direct", first["direct stream"]),
		summarize("streamed: first event, injected", first["via stream"]),
		summarize("streamed: whole stream, direct", total["direct stream"]),
		summarize("streamed: whole stream, injected", total["via stream"]),
	}
	for _, r := range rows {
		fmt.Printf("| %s | %d | %s | %s | %s |\n", r.name, r.n, ms(r.p50), ms(r.p99), ms(r.avg))
	}
	fmt.Printf("\nrequest p50 injected − direct = %s (goal ≤ 2 ms); first event p50 injected − direct = %s (goal ≤ 2 ms)\n",
		ms(rows[1].p50-rows[0].p50), ms(rows[3].p50-rows[2].p50))
	fmt.Printf("the API accepted %d TLS connections for its %d requests (warm-up included)\n", conns.Load(), reqs.Load())
	if u := tk.Usage; u != nil {
		fmt.Printf("the task's usage: %d requests, %d bytes sent, %d received, %d input and %d output tokens, $%.4f\n",
			u.Requests, u.BytesSent, u.BytesReceived, u.InputTokens, u.OutputTokens, u.CostUsd)
	}
	return nil
}

// fakeMessages answers /v1/messages as the API does, small: a JSON answer,
// or (asked to stream) message_start flushed at once, then the rest.
func fakeMessages(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	if !strings.Contains(string(b), `"stream":true`) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":8,"output_tokens":2}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-haiku-4-5\",\"usage\":{\"input_tokens\":8,\"output_tokens\":1}}}\n\n")
	w.(http.Flusher).Flush()
	fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n")
	fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":2}}\n\n")
	fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
}
