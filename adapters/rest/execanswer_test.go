package rest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// answers returns an exec's JSON answer as the generated response type
// writes it (encoding/json) and as execAnswer writes it.
func answers(t testing.TB, r ports.CommandResult, id, agentID string, stdout, stderr []byte, truncated bool) (want, got *httptest.ResponseRecorder) {
	t.Helper()
	want = httptest.NewRecorder()
	if err := restapi.ExecCommand200JSONResponse(execResult(id, agentID, r, stdout, stderr, truncated)).VisitExecCommandResponse(want); err != nil {
		t.Fatal(err)
	}
	// The answer owns pooled buffers: give it copies in buffers of its own.
	so := append(getOutBuf(max(len(stdout), 1)), stdout...)
	se := append(getOutBuf(max(len(stderr), 1)), stderr...)
	got = httptest.NewRecorder()
	if err := newExecAnswer(execResult(id, agentID, r, nil, nil, truncated), so, se).VisitExecCommandResponse(got); err != nil {
		t.Fatal(err)
	}
	return want, got
}

func sameAnswer(t testing.TB, want, got *httptest.ResponseRecorder) {
	t.Helper()
	if got.Code != want.Code || got.Header().Get("Content-Type") != want.Header().Get("Content-Type") {
		t.Fatalf("status %d %q, want %d %q", got.Code, got.Header().Get("Content-Type"), want.Code, want.Header().Get("Content-Type"))
	}
	if !json.Valid(got.Body.Bytes()) {
		t.Fatalf("not valid JSON: %q", clipBytes(got.Body.Bytes()))
	}
	var a, b restapi.ExecResult
	if err := json.Unmarshal(want.Body.Bytes(), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got.Body.Bytes(), &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("decodes to %+v, want %+v", b, a)
	}
	if !bytes.Equal(got.Body.Bytes(), want.Body.Bytes()) {
		t.Fatalf("answer differs from encoding/json's:\n got %q\nwant %q", clipBytes(got.Body.Bytes()), clipBytes(want.Body.Bytes()))
	}
}

func clipBytes(b []byte) []byte {
	if len(b) > 600 {
		return b[:600]
	}
	return b
}

func TestExecAnswerIsEncodingJSONs(t *testing.T) {
	long := strings.Repeat("abcdefgh", 40<<10) // beyond a stage: written directly
	cases := []struct {
		name           string
		stdout, stderr string
		r              ports.CommandResult
	}{
		{"empty", "", "", ports.CommandResult{}},
		{"text", "hello\n", "warn\n", ports.CommandResult{ExitCode: 0, Duration: 12 * time.Millisecond}},
		{"escapes", "\"quote\" \\ <b>&amp;</b> \x00\x01\b\f\n\r\t\x1f\x7f", "", ports.CommandResult{ExitCode: 1}},
		{"line separators", "a\u2028b\u2029c\u2027\u202a é 日本 😀", "\u2028", ports.CommandResult{}},
		{"separator at the end", "x\u2028", "\u2029", ports.CommandResult{}},
		{"invalid UTF-8", "ok", "\xff\xfe bad", ports.CommandResult{ExitCode: 2}},
		{"cut rune", "ab\xe2\x80", "", ports.CommandResult{}},
		{"binary", string([]byte{0, 1, 2, 0x80, 0xe2, 0x80, 0xa8}), "", ports.CommandResult{}},
		{"long text", long + "<" + long + "\u2028" + long, "", ports.CommandResult{}},
		{"long binary", "\xff" + long + long, long, ports.CommandResult{}},
		{"signal and error", "", "", ports.CommandResult{ExitCode: 137, Signal: 9, Error: "killed <by> \"us\" \xff", TimedOut: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, got := answers(t, c.r, "cmd-<1>", "agent&\u2028", []byte(c.stdout), []byte(c.stderr), c.name == "long text")
			sameAnswer(t, want, got)
		})
	}
}

// The whole answer, text and base64, against encoding/json's for any
// output: valid JSON, the same value, the same bytes.
func FuzzExecAnswer(f *testing.F) {
	f.Add([]byte("hello\n"), []byte(""), "e1", 0, 0, "")
	f.Add([]byte("<script>&\u2028\u2029\"\\\x00\x1f\x7f"), []byte("\t\r\n\b\f"), "e2", 1, 0, "")
	f.Add([]byte("\xe2\x80\xa8\xe2\x80\xa9\xe2\x80\xe2"), []byte("é"), "e3", 137, 9, "boom <x>")
	f.Add([]byte{0xff, 0, 1, 2, 3}, []byte("text"), "e4", 127, 0, "no such file \xff")
	f.Add(bytes.Repeat([]byte("0123456789abcdef<"), 100), []byte("\x00"), "e5", 0, 0, "")
	f.Fuzz(func(t *testing.T, stdout, stderr []byte, id string, code, sig int, msg string) {
		r := ports.CommandResult{ExitCode: code, Signal: sig, Error: msg, Duration: time.Duration(code) * time.Millisecond}
		want, got := answers(t, r, id, "agent-"+id, stdout, stderr, code%2 == 0)
		sameAnswer(t, want, got)
	})
}

// A writer whose client went away.
type failingWriter struct{ *httptest.ResponseRecorder }

func (failingWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

func TestExecAnswerWriteErrorSaysCut(t *testing.T) {
	a := newExecAnswer(execResult("c", "a", ports.CommandResult{}, nil, nil, false), append(getOutBuf(1), "out"...), nil)
	err := a.VisitExecCommandResponse(failingWriter{httptest.NewRecorder()})
	var cut *streamBroken
	if err == nil || !errors.As(err, &cut) || !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("err %v, want a streamBroken", err)
	}
	if a.stdout != nil || a.stderr != nil {
		t.Fatal("the answer kept its buffers")
	}
}

// The collector keeps the first max bytes of each stream across chunks
// and buffer growth, and says it dropped the rest.
func TestCollectorKeepsTheFirstMaxBytes(t *testing.T) {
	c := &collector{max: 100 << 10}
	var want bytes.Buffer
	for i := range 40 {
		chunk := bytes.Repeat([]byte{byte('a' + i%26)}, 3000+i*7)
		c.add(ports.OutputChunk{Stream: ports.StreamStdout, Data: chunk})
		want.Write(chunk)
	}
	c.add(ports.OutputChunk{Stream: ports.StreamStderr, Data: []byte("err")})
	out, errb, truncated := c.take()
	if !truncated || !bytes.Equal(out, want.Bytes()[:100<<10]) || string(errb) != "err" {
		t.Fatalf("took %d bytes (want %d), stderr %q, truncated %v", len(out), 100<<10, errb, truncated)
	}
}

func BenchmarkExecAnswer(b *testing.B) {
	text := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuvwxyz+/ABCDEFGHIJKLMNOPQRSTUVWXYZ\n"), (1<<20)/64)
	bin := append([]byte{0xff}, text[1:]...)
	r := ports.CommandResult{Duration: time.Millisecond}
	for _, c := range []struct {
		name string
		out  []byte
	}{{"text", text}, {"binary", bin}} {
		b.Run(c.name+"/encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(c.out)))
			for b.Loop() {
				w := httptest.NewRecorder()
				_ = restapi.ExecCommand200JSONResponse(execResult("c", "a", r, c.out, nil, false)).VisitExecCommandResponse(w)
			}
		})
		b.Run(c.name+"/execAnswer", func(b *testing.B) {
			b.SetBytes(int64(len(c.out)))
			w := httptest.NewRecorder()
			for b.Loop() {
				w.Body.Reset()
				out := append(getOutBuf(len(c.out)), c.out...)
				_ = newExecAnswer(execResult("c", "a", r, nil, nil, false), out, nil).VisitExecCommandResponse(w)
			}
		})
	}
}

// TestExecAnswerLengthAndFlush: over a real server, an answer that fits in
// the stage comes with its Content-Length (so the client has all of it
// when the handler flushes, before the request's log line and audit
// entry), a longer one chunked; both whole and as encoding/json writes them.
func TestExecAnswerLengthAndFlush(t *testing.T) {
	e := newEnv(t)
	for _, n := range []int{2, 10_000, stageSize + 1, 3 * stageSize} {
		req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/agents/a1/exec", strings.NewReader(fmt.Sprintf(`{"command":"spam","args":["%d"]}`, n)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		var res restapi.ExecResult
		if err := json.Unmarshal(body, &res); err != nil || res.Stdout != strings.Repeat("x", n) {
			t.Fatalf("%d bytes of output: %v, %d bytes of stdout back", n, err, len(res.Stdout))
		}
		checkContract(t, req, resp.StatusCode, resp.Header, body)
		fits := n <= 10_000 // in the stage; a longer run goes straight out
		if fits && resp.ContentLength != int64(len(body)) || !fits && (resp.ContentLength != -1 || len(resp.TransferEncoding) == 0) {
			t.Fatalf("%d bytes of output, a %d-byte answer: Content-Length %d, Transfer-Encoding %v", n, len(body), resp.ContentLength, resp.TransferEncoding)
		}
	}
}
