package rest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// mpStream is a multipart exec answer being read: the parts through a
// standard MIME reader, every byte of the body kept in all.
type mpStream struct {
	req  *http.Request
	resp *http.Response
	mr   *multipart.Reader
	all  *bytes.Buffer
	sep  string // the boundary
}

// openExecMultipart posts an exec asking for multipart/mixed and returns
// the answer once its headers are in; reading is bounded as in
// openExecStream.
func openExecMultipart(t *testing.T, e *env, ctx context.Context, body string) *mpStream {
	t.Helper()
	req, resp := postExecAccepting(t, e, ctx, body, "multipart/mixed")
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != 200 || err != nil || mt != "multipart/mixed" || params["boundary"] == "" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d, content type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	all := &bytes.Buffer{}
	return &mpStream{req: req, resp: resp, all: all, sep: params["boundary"],
		mr: multipart.NewReader(io.TeeReader(resp.Body, all), params["boundary"])}
}

// next returns the next part, checking its headers: a stream's raw bytes,
// or the end.
func (s *mpStream) next(t *testing.T) *multipart.Part {
	t.Helper()
	p, err := s.mr.NextPart()
	if err != nil {
		t.Fatalf("next part: %v (read %q)", err, apiClip(s.all.Bytes()))
	}
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		t.Fatalf("part headers %v: %v", p.Header, err)
	}
	wantType := "application/octet-stream"
	if params["name"] == "end" {
		wantType = "application/json"
	}
	if p.Header.Get("Content-Type") != wantType || (params["name"] != "stdout" && params["name"] != "stderr" && params["name"] != "end") {
		t.Fatalf("part headers %v", p.Header)
	}
	return p
}

func partName(p *multipart.Part) string {
	_, params, _ := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	return params["name"]
}

// rest reads the parts to the end: each stream's bytes, the order of the
// runs (a stream's parts in a row counted once) and the end's status. It
// checks that the closing delimiter ends the body.
func (s *mpStream) rest(t *testing.T) (out, errb []byte, order []string, end restapi.ExecStreamEnd) {
	t.Helper()
	var o, e bytes.Buffer
	for {
		p := s.next(t)
		b, err := io.ReadAll(p)
		if err != nil {
			t.Fatalf("reading part %s: %v", partName(p), err)
		}
		name := partName(p)
		if name == "end" {
			if err := json.Unmarshal(b, &end); err != nil {
				t.Fatalf("end part %q: %v", b, err)
			}
			break
		}
		if len(order) == 0 || order[len(order)-1] != name {
			order = append(order, name)
		}
		if name == "stdout" {
			o.Write(b)
		} else {
			e.Write(b)
		}
	}
	if _, err := s.mr.NextPart(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the end part: %v", err)
	}
	if rest, _ := io.ReadAll(s.resp.Body); len(rest) != 0 {
		t.Fatalf("%d bytes after the closing delimiter: %q", len(rest), apiClip(rest))
	}
	if !bytes.HasSuffix(s.all.Bytes(), []byte("\r\n--"+s.sep+"--\r\n")) {
		t.Fatalf("the body does not end with the closing delimiter: …%q", s.all.Bytes()[max(0, s.all.Len()-100):])
	}
	return o.Bytes(), e.Bytes(), order, end
}

// TestExecStreamsMultipart: with Accept: multipart/mixed each run of output
// is readable while the command still runs (the fake command does not end
// until the test has read it), both streams come in order and byte-exact as
// raw part bodies (text with quotes, CRLFs and a would-be delimiter,
// invalid UTF-8, 1 MiB of random bytes), and a last part "end" carries the
// exit status; the whole body keeps openapi.yaml.
func TestExecStreamsMultipart(t *testing.T) {
	e := newEnv(t)
	s := openExecMultipart(t, e, context.Background(), `{"command":"sleep","max_output_bytes":4194304}`)
	c := e.nextCommand()

	first := "hello \"world\"\r\n--not-the-boundary\r\n\ttab \u00e9\x01"
	c.Stdout(first)
	p := s.next(t)
	got := make([]byte, len(first))
	if _, err := io.ReadFull(p, got); err != nil || partName(p) != "stdout" || string(got) != first {
		t.Fatalf("first part %s: %q, %v", partName(p), got, err)
	}
	select {
	case <-c.Ended():
		t.Fatal("the command ended before its output was read")
	default:
	}
	// A reader cannot hand out a run's last bytes while they could begin
	// a delimiter ("\r\n--…"), so the bytes read live end elsewhere; the
	// last run below ends so.
	bad := []byte{0xff, '\r', 0xfe, 0x00, 'a', 0xc3}
	c.Emit(ports.StreamStderr, bad)
	p = s.next(t)
	got = make([]byte, len(bad))
	if _, err := io.ReadFull(p, got); err != nil || partName(p) != "stderr" || !bytes.Equal(got, bad) {
		t.Fatalf("second part %s: %q, %v", partName(p), got, err)
	}

	big := make([]byte, 1<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	var wantOrder []string
	var wantErr []byte
	for i := 0; i < len(big); i += 64 << 10 {
		c.Emit(ports.StreamStdout, big[i:i+64<<10])
		msg := []byte("progress " + string(rune('a'+i/(64<<10))) + "\n")
		c.Emit(ports.StreamStderr, msg)
		wantOrder = append(wantOrder, "stdout", "stderr")
		wantErr = append(wantErr, msg...)
	}
	c.Stdout("tail\r\n--")
	wantOrder = append(wantOrder, "stdout")
	c.Finish(ports.CommandResult{ExitCode: 3, Duration: 1500 * time.Millisecond})

	out, errb, order, end := s.rest(t)
	if strings.Join(order, ",") != strings.Join(wantOrder, ",") {
		t.Fatalf("runs %v, want %v", order, wantOrder)
	}
	if !bytes.Equal(out, append(big, "tail\r\n--"...)) {
		t.Fatalf("stdout: %d bytes, not the 1 MiB and the tail sent", len(out))
	}
	if !bytes.Equal(errb, wantErr) {
		t.Fatalf("stderr %q, want %q", errb, wantErr)
	}
	if end.CommandId != c.ID() || end.AgentId != "a1" || end.ExitCode == nil || *end.ExitCode != 3 ||
		end.DurationMs == nil || *end.DurationMs != 1500 || end.Success == nil || *end.Success ||
		end.TimedOut == nil || *end.TimedOut || end.Truncated == nil || *end.Truncated || end.Code != nil {
		t.Fatalf("end part %+v", end)
	}
	checkContract(t, s.req, s.resp.StatusCode, s.resp.Header, s.all.Bytes())
}

// TestExecMultipartJoinsSmallChunks: chunks of one stream that queue up
// while the answer is being written go out as one part (fewer writes), and
// the bytes stay exact and in order.
func TestExecMultipartJoinsSmallChunks(t *testing.T) {
	e := newEnv(t)
	s := openExecMultipart(t, e, context.Background(), `{"command":"sleep"}`)
	c := e.nextCommand()
	var want []byte
	for i := range 200 {
		line := []byte(strings.Repeat(string(rune('a'+i%26)), i%7+1) + "\n")
		c.Emit(ports.StreamStdout, line)
		want = append(want, line...)
	}
	c.Exit(0)
	parts := 0
	var out []byte
	for {
		p := s.next(t)
		b, err := io.ReadAll(p)
		if err != nil {
			t.Fatal(err)
		}
		if partName(p) == "end" {
			break
		}
		parts++
		out = append(out, b...)
	}
	if !bytes.Equal(out, want) {
		t.Fatalf("stdout %q, want %q", apiClip(out), apiClip(want))
	}
	// The fake delivers all 200 before the answer's writer runs again:
	// without joining, each would be a part.
	if parts >= 200 {
		t.Fatalf("%d parts for 200 small chunks", parts)
	}
}

// TestExecMultipartLimitsAndLoss: max_output_bytes holds per stream as in
// the JSON form (truncated in the end part), and a command its agent lost
// ends with code agent_gone instead of an exit status.
func TestExecMultipartLimitsAndLoss(t *testing.T) {
	e := newEnv(t)
	s := openExecMultipart(t, e, context.Background(), `{"command":"sleep","max_output_bytes":5}`)
	c := e.nextCommand()
	c.Stdout("abc")
	c.Stdout("defgh")
	c.Stderr("12345678")
	c.Exit(0)
	out, errb, _, end := s.rest(t)
	if string(out) != "abcde" || string(errb) != "12345" || end.Truncated == nil || !*end.Truncated || end.Success == nil || !*end.Success {
		t.Fatalf("stdout %q, stderr %q, end %+v", out, errb, end)
	}
	checkContract(t, s.req, s.resp.StatusCode, s.resp.Header, s.all.Bytes())

	s = openExecMultipart(t, e, context.Background(), `{"command":"sleep"}`)
	c = e.nextCommand()
	c.Lose()
	out, errb, _, end = s.rest(t)
	if len(out)+len(errb) != 0 || end.Code == nil || *end.Code != "agent_gone" || end.Error == nil || !strings.Contains(*end.Error, "lost") || end.ExitCode != nil {
		t.Fatalf("end of a lost command %+v (output %q %q)", end, out, errb)
	}
	checkContract(t, s.req, s.resp.StatusCode, s.resp.Header, s.all.Bytes())
}

// TestExecMultipartCallerGoes: a caller that goes away mid-answer has its
// command killed, as in the JSON form.
func TestExecMultipartCallerGoes(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := openExecMultipart(t, e, ctx, `{"command":"sleep"}`)
	c := e.nextCommand()
	c.Stdout("x")
	p := s.next(t)
	if _, err := io.ReadFull(p, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	cancel()
	testkit.Eventually(t, 15*time.Second, "the command killed", func() bool {
		kills, ctxCancelled := c.Killed()
		return kills > 0 || ctxCancelled
	})
}

// FuzzMultipartEncoding: whatever the output — chunks of either stream in
// any order and batches, any bytes (CRLFs, dashes, would-be delimiters) —
// a standard MIME reader gets back each stream's bytes exactly, then the
// end part, then the end of the body.
func FuzzMultipartEncoding(f *testing.F) {
	f.Add([]byte("hello\r\n--"), []byte("\r\n--x--\r\n"), uint16(0x5a5a))
	f.Add([]byte("\r"), []byte("\n"), uint16(1))
	f.Add([]byte("--\r\n\r\n"), []byte{0, 0xff, '\r'}, uint16(0xffff))
	f.Fuzz(func(t *testing.T, a, b []byte, pattern uint16) {
		// Cut a and b in pieces, alternately, each piece's stream and
		// whether a batch ends after it taken from pattern's bits.
		var batches [][]ports.OutputChunk
		var batch []ports.OutputChunk
		var want [2][]byte
		bit := 0
		next := func() bool { v := pattern>>(bit%16)&1 == 1; bit++; return v }
		for _, src := range [][]byte{a, b} {
			for len(src) > 0 {
				n := min(len(src), 1+int(pattern>>(bit%16))%7)
				i := 0
				st := ports.StreamStdout
				if next() {
					st, i = ports.StreamStderr, 1
				}
				batch = append(batch, ports.OutputChunk{Stream: st, Data: src[:n]})
				want[i] = append(want[i], src[:n]...)
				src = src[n:]
				if next() {
					batches, batch = append(batches, batch), nil
				}
			}
		}
		batches = append(batches, batch)
		enc := newMultipartEncoding()
		rec := httptest.NewRecorder()
		for _, b := range batches {
			if len(b) > 0 {
				if err := enc.chunks(rec, b); err != nil {
					t.Fatal(err)
				}
			}
		}
		code := int(pattern % 256)
		if err := enc.end(rec, restapi.ExecStreamEnd{CommandId: "ex-1", AgentId: "a1", ExitCode: &code}); err != nil {
			t.Fatal(err)
		}
		body := rec.Body.Bytes()
		mr := multipart.NewReader(bytes.NewReader(body), enc.boundary)
		var got [2][]byte
		for {
			p, err := mr.NextPart()
			if err != nil {
				t.Fatalf("no end part: %v in %q", err, apiClip(body))
			}
			b, err := io.ReadAll(p)
			if err != nil {
				t.Fatal(err)
			}
			name := partName(p)
			if name == "end" {
				var end restapi.ExecStreamEnd
				if err := json.Unmarshal(b, &end); err != nil || end.ExitCode == nil || *end.ExitCode != code {
					t.Fatalf("end part %q: %v", b, err)
				}
				break
			}
			switch name {
			case "stdout":
				got[0] = append(got[0], b...)
			case "stderr":
				got[1] = append(got[1], b...)
			default:
				t.Fatalf("part %v", p.Header)
			}
		}
		if _, err := mr.NextPart(); !errors.Is(err, io.EOF) {
			t.Fatalf("after the end part: %v", err)
		}
		if !bytes.Equal(got[0], want[0]) || !bytes.Equal(got[1], want[1]) {
			t.Fatalf("stdout %q stderr %q, want %q %q", got[0], got[1], want[0], want[1])
		}
		if !bytes.HasSuffix(body, []byte("\r\n--"+enc.boundary+"--\r\n")) {
			t.Fatalf("body ends %q", body[max(0, len(body)-80):])
		}
	})
}

// BenchmarkStreamedChunks is the server's cost of writing 1 MiB of output
// that came in 64 KiB chunks, in each streamed form, to a discarding
// ResponseWriter: NDJSON escapes text (or base64s other bytes), multipart
// writes them as they are.
func BenchmarkStreamedChunks(b *testing.B) {
	raw := make([]byte, 64<<10)
	if _, err := rand.Read(raw); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		enc  func() streamEncoding
	}{{"ndjson", func() streamEncoding { return &ndjsonEncoding{} }}, {"multipart", func() streamEncoding { return newMultipartEncoding() }}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(1 << 20)
			chunks := make([]ports.OutputChunk, 16)
			for i := range chunks {
				chunks[i] = ports.OutputChunk{Stream: ports.StreamStdout, Data: raw}
			}
			w := discardResponse{h: http.Header{}}
			for b.Loop() {
				enc := c.enc()
				for i := range chunks {
					if err := enc.chunks(w, chunks[i:i+1]); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

type discardResponse struct{ h http.Header }

func (d discardResponse) Header() http.Header       { return d.h }
func (discardResponse) Write(p []byte) (int, error) { return len(p), nil }
func (discardResponse) WriteHeader(int)             {}
