package rest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// streamLine is any line of a streamed exec: a chunk or the end.
type streamLine struct {
	restapi.ExecStreamEnd
	Stream  string  `json:"stream"`
	Data    *string `json:"data"`
	DataB64 []byte  `json:"data_b64"`
}

// openExecStream posts an exec asking for NDJSON and returns the answer
// once its headers are in. Reading it is bounded (60 s): a line that never
// comes fails the test instead of hanging it.
func openExecStream(t *testing.T, e *env, ctx context.Context, body string) (*http.Request, *http.Response, *bufio.Reader) {
	t.Helper()
	req, resp := postExecAccepting(t, e, ctx, body, "application/x-ndjson")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d, content type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return req, resp, bufio.NewReaderSize(resp.Body, 64<<10)
}

// postExecAccepting posts an exec with the given Accept and returns the
// request and its answer once the headers came (the body closed at the
// test's end).
func postExecAccepting(t *testing.T, e *env, ctx context.Context, body, accept string) (*http.Request, *http.Response) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/api/v1/agents/a1/exec", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	req.Header.Set("Authorization", "Bearer "+testToken)
	type answer struct {
		resp *http.Response
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := e.srv.Client().Do(req)
		got <- answer{resp, err}
	}()
	a := testkit.Receive(t, 15*time.Second, got, "no answer to the exec accepting "+accept)
	if a.err != nil {
		t.Fatal(a.err)
	}
	t.Cleanup(func() { a.resp.Body.Close() })
	return req, a.resp
}

// readLine reads one NDJSON line (the body it came in is kept in all).
func readLine(t *testing.T, rd *bufio.Reader, all *bytes.Buffer) streamLine {
	t.Helper()
	b, err := rd.ReadBytes('\n')
	if err != nil {
		t.Fatalf("reading a line: %v (read %q)", err, b)
	}
	all.Write(b)
	var l streamLine
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("line %q: %v", b, err)
	}
	if (l.Data != nil) == (l.DataB64 != nil) && l.Stream != "" {
		t.Fatalf("a chunk with both or neither of data and data_b64: %q", b)
	}
	return l
}

func (l streamLine) bytes() []byte {
	if l.Data != nil {
		return []byte(*l.Data)
	}
	return l.DataB64
}

// TestExecStreamsNDJSON: with Accept: application/x-ndjson each chunk is
// readable while the command still runs (the fake command does not end
// until the test has read it), both streams come in order and byte-exact
// (text, invalid UTF-8, 1 MiB of random bytes), and a last line carries
// the exit status; the whole body keeps openapi.yaml.
func TestExecStreamsNDJSON(t *testing.T) {
	e := newEnv(t)
	req, resp, rd := openExecStream(t, e, context.Background(), `{"command":"sleep","max_output_bytes":4194304}`)
	c := e.nextCommand()
	var all bytes.Buffer

	// The gate: the command runs until c.Exit below, so each line read
	// here was flushed before the command ended.
	c.Stdout("hello \"world\"\n\ttab \u00e9\x01")
	if l := readLine(t, rd, &all); l.Stream != "stdout" || l.Data == nil || *l.Data != "hello \"world\"\n\ttab \u00e9\x01" {
		t.Fatalf("first line %+v", l)
	}
	bad := []byte{0xff, 0xfe, 0x00, 'a', 0xc3}
	c.Emit(ports.StreamStderr, bad)
	if l := readLine(t, rd, &all); l.Stream != "stderr" || l.DataB64 == nil || !bytes.Equal(l.bytes(), bad) {
		t.Fatalf("invalid UTF-8 line %+v", l)
	}
	select {
	case <-c.Ended():
		t.Fatal("the command ended before its output was read")
	default:
	}

	// 1 MiB of random bytes on stdout in 64 KiB chunks, a line of text on
	// stderr between them.
	big := make([]byte, 1<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	var wantOrder []string
	wantErr := append([]byte(nil), bad...)
	for i := 0; i < len(big); i += 64 << 10 {
		c.Emit(ports.StreamStdout, big[i:i+64<<10])
		wantOrder = append(wantOrder, "stdout")
		msg := []byte("progress " + string(rune('a'+i/(64<<10))) + "\n")
		c.Emit(ports.StreamStderr, msg)
		wantOrder = append(wantOrder, "stderr")
		wantErr = append(wantErr, msg...)
	}
	c.Finish(ports.CommandResult{ExitCode: 3, Duration: 1500 * time.Millisecond})

	var gotOut, gotErr bytes.Buffer
	var order []string
	var end streamLine
	for {
		l := readLine(t, rd, &all)
		if l.Stream == "" {
			end = l
			break
		}
		// A batch may join chunks of one stream only if the link sent
		// them so; the fake sends each apart, so lines match chunks.
		order = append(order, l.Stream)
		if l.Stream == "stdout" {
			gotOut.Write(l.bytes())
		} else {
			gotErr.Write(l.bytes())
		}
	}
	if rest, _ := io.ReadAll(rd); len(rest) != 0 {
		t.Fatalf("%d bytes after the last line: %q", len(rest), apiClip(rest))
	}
	if strings.Join(order, ",") != strings.Join(wantOrder, ",") {
		t.Fatalf("chunk order %v, want %v", order, wantOrder)
	}
	if !bytes.Equal(gotOut.Bytes(), big) {
		t.Fatalf("stdout: %d bytes, not the 1 MiB sent", gotOut.Len())
	}
	if !bytes.Equal(gotErr.Bytes(), wantErr[len(bad):]) {
		t.Fatalf("stderr %q, want %q", gotErr.Bytes(), wantErr[len(bad):])
	}
	if end.CommandId != c.ID() || end.AgentId != "a1" || end.ExitCode == nil || *end.ExitCode != 3 ||
		end.DurationMs == nil || *end.DurationMs != 1500 || end.Success == nil || *end.Success ||
		end.TimedOut == nil || *end.TimedOut || end.Truncated == nil || *end.Truncated || end.Code != nil {
		t.Fatalf("end line %+v", end.ExecStreamEnd)
	}
	checkContract(t, req, resp.StatusCode, resp.Header, all.Bytes())
}

func apiClip(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// TestExecStreamLimitsAndLoss: max_output_bytes holds per stream as in the
// JSON form (truncated on the last line), and a command its agent lost
// ends with code agent_gone instead of an exit status.
func TestExecStreamLimitsAndLoss(t *testing.T) {
	e := newEnv(t)
	_, _, rd := openExecStream(t, e, context.Background(), `{"command":"sleep","max_output_bytes":5}`)
	c := e.nextCommand()
	c.Stdout("abc")
	c.Stdout("defgh")
	c.Stderr("12345678")
	c.Exit(0)
	var all bytes.Buffer
	var out, errb string
	var end streamLine
	for {
		l := readLine(t, rd, &all)
		if l.Stream == "" {
			end = l
			break
		}
		if l.Stream == "stdout" {
			out += string(l.bytes())
		} else {
			errb += string(l.bytes())
		}
	}
	if out != "abcde" || errb != "12345" || end.Truncated == nil || !*end.Truncated || end.Success == nil || !*end.Success {
		t.Fatalf("stdout %q, stderr %q, end %+v", out, errb, end.ExecStreamEnd)
	}

	_, _, rd = openExecStream(t, e, context.Background(), `{"command":"sleep"}`)
	c = e.nextCommand()
	c.Lose()
	l := readLine(t, rd, &all)
	if l.Code == nil || *l.Code != "agent_gone" || l.Error == nil || !strings.Contains(*l.Error, "lost") || l.ExitCode != nil {
		t.Fatalf("end of a lost command %+v", l.ExecStreamEnd)
	}
}

// TestExecStreamCallerGoes: a caller that goes away mid-stream has its
// command killed, as in the JSON form.
func TestExecStreamCallerGoes(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, _, rd := openExecStream(t, e, ctx, `{"command":"sleep"}`)
	c := e.nextCommand()
	c.Stdout("x")
	readLine(t, rd, &bytes.Buffer{})
	cancel()
	testkit.Eventually(t, 15*time.Second, "the command killed", func() bool {
		kills, ctxCancelled := c.Killed()
		return kills > 0 || ctxCancelled
	})
}

// TestExecStreamNegotiation: errors before the command starts keep their
// JSON answers; without a preference for a streamed form the answer is
// JSON; of the two streamed forms the higher q wins, multipart on a tie.
func TestExecStreamNegotiation(t *testing.T) {
	e := newEnv(t)
	send := func(path, accept string) response {
		req, _ := http.NewRequest("POST", e.srv.URL+path, strings.NewReader(`{"command":"echo","args":["hi"]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+testToken)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		checkContract(t, req, resp.StatusCode, resp.Header, b)
		return response{status: resp.StatusCode, header: resp.Header, body: b}
	}
	expect(t, send("/api/v1/agents/ghost/exec", "application/x-ndjson"), 404, "agent_not_found")
	expect(t, send("/api/v1/agents/off/exec", "application/x-ndjson"), 409, "agent_not_connected")
	expect(t, send("/api/v1/agents/ghost/exec", "multipart/mixed"), 404, "agent_not_found")
	expect(t, send("/api/v1/agents/off/exec", "multipart/mixed"), 409, "agent_not_connected")
	for accept, want := range map[string]string{
		"":                 "application/json",
		"application/json": "application/json",
		"*/*":              "application/json",
		"application/x-ndjson;q=0.5, application/json":                 "application/json",
		"application/x-ndjson":                                         "application/x-ndjson",
		"application/json;q=0.9, application/x-ndjson":                 "application/x-ndjson",
		"multipart/mixed":                                              "multipart/mixed; boundary=",
		"multipart/mixed, application/x-ndjson":                        "multipart/mixed; boundary=",
		"multipart/mixed;q=0.5, application/x-ndjson":                  "application/x-ndjson",
		"application/json, multipart/mixed;q=0.9":                      "application/json",
		"multipart/mixed;q=0, application/x-ndjson;q=0":                "application/json",
		"application/x-ndjson;q=0.4, multipart/mixed;q=0.6, */*;q=0.1": "multipart/mixed; boundary=",
	} {
		r := send("/api/v1/agents/a1/exec", accept)
		if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), want) {
			t.Errorf("Accept %q: %d %q, want %s", accept, r.status, r.header.Get("Content-Type"), want)
		}
	}
}

// BenchmarkChunkLine is the server's cost of one 64 KiB chunk's line: text
// (a JSON string, escaped in one pass) and random bytes (base64).
func BenchmarkChunkLine(b *testing.B) {
	raw := make([]byte, 64<<10)
	if _, err := rand.Read(raw); err != nil {
		b.Fatal(err)
	}
	text := []byte(base64.StdEncoding.EncodeToString(raw))[:64<<10]
	for _, c := range []struct {
		name string
		data []byte
	}{{"text", text}, {"random", raw}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.data)))
			var buf []byte
			for b.Loop() {
				buf = appendChunkLine(buf[:0], ports.OutputChunk{Stream: ports.StreamStdout, Data: c.data})
			}
		})
	}
}
