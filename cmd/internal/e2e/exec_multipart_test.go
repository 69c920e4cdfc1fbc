package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/apicontract"
)

// TestExecMultipartThroughHostAgent: POST …/exec with Accept:
// multipart/mixed through the real server and a host agent gives 1 MiB of
// random bytes as raw part bodies, exactly (their hash is the hash
// sha256sum took of the file tee wrote), stderr beside it, then the end
// part with the exit status and the closing delimiter; a standard MIME
// reader reads it and the answer keeps openapi.yaml.
func TestExecMultipartThroughHostAgent(t *testing.T) {
	s := startServer(t, 1, "")
	resp := execRandomMiB(t, s, "multipart/mixed")
	defer resp.Body.Close()
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != 200 || err != nil || mt != "multipart/mixed" || params["boundary"] == "" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var all bytes.Buffer
	mr := multipart.NewReader(io.TeeReader(resp.Body, &all), params["boundary"])
	var stderr bytes.Buffer
	stdout := sha256.New()
	n, parts := 0, 0
	var end restapi.ExecStreamEnd
	for {
		p, err := mr.NextPart()
		if err != nil {
			t.Fatalf("the answer ended without its end part after %d parts: %v", parts, err)
		}
		parts++
		_, disp, _ := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
		b, err := io.ReadAll(p)
		if err != nil {
			t.Fatalf("part %d: %v", parts, err)
		}
		if disp["name"] == "end" {
			if p.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("end part headers %v", p.Header)
			}
			if err := json.Unmarshal(b, &end); err != nil {
				t.Fatalf("end part %q: %v", b, err)
			}
			break
		}
		if p.Header.Get("Content-Type") != "application/octet-stream" {
			t.Fatalf("part %d headers %v", parts, p.Header)
		}
		switch disp["name"] {
		case "stdout":
			stdout.Write(b)
			n += len(b)
		case "stderr":
			stderr.Write(b)
		default:
			t.Fatalf("part %d: headers %v", parts, p.Header)
		}
	}
	if _, err := mr.NextPart(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the end part: %v", err)
	}
	got := hex.EncodeToString(stdout.Sum(nil))
	want, _, _ := strings.Cut(stderr.String(), " ")
	if n != 1<<20 || got != want {
		t.Fatalf("%d bytes with sha256 %s; the file's sha256sum: %q", n, got, stderr.String())
	}
	if end.ExitCode == nil || *end.ExitCode != 7 || end.Success == nil || *end.Success || end.Truncated == nil || *end.Truncated ||
		end.AgentId != "host-01" || !strings.HasPrefix(end.CommandId, "ex-") || end.Code != nil {
		t.Fatalf("end part %+v", end)
	}
	if !bytes.HasSuffix(all.Bytes(), []byte("\r\n--"+params["boundary"]+"--\r\n")) {
		t.Fatalf("the body does not end with the closing delimiter")
	}
	if err := apicontract.CheckResponse(resp.Request, resp.StatusCode, resp.Header, all.Bytes()); err != nil {
		t.Fatal(err)
	}
	t.Logf("1 MiB in %d parts", parts)
}

// TestCtlExecRawOutput: agenticctl exec (which asks for multipart/mixed)
// writes the command's output byte for byte — 300 000 random bytes on
// stdout, their sha256sum on stderr — and exits with its exit code.
func TestCtlExecRawOutput(t *testing.T) {
	s := startServer(t, 1, "")
	file := filepath.Join(t.TempDir(), "random")
	out, errOut, code := ctl(t, s.RESTURL, s.Token, "exec", "host-01", "--", "sh", "-c",
		`head -c 300000 /dev/urandom > "$1"; cat "$1"; sha256sum < "$1" >&2; exit 5`, "sh", file)
	sum := sha256.Sum256([]byte(out))
	want, _, _ := strings.Cut(errOut, " ")
	if code != 5 || len(out) != 300000 || hex.EncodeToString(sum[:]) != want {
		t.Fatalf("exit %d, %d bytes with sha256 %x; the file's sha256sum: %q", code, len(out), sum, errOut)
	}
}
