package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/apicontract"
)

// TestExecStreamedThroughHostAgent: POST …/exec with Accept:
// application/x-ndjson through the real server and a host agent streams
// 1 MiB of random bytes exactly (their hash is the hash sha256sum took of
// the file tee wrote), stderr beside it, and ends with the exit status; the
// answer keeps openapi.yaml.
func TestExecStreamedThroughHostAgent(t *testing.T) {
	s := startServer(t, 1, "")
	resp := execRandomMiB(t, s, "application/x-ndjson")
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "application/x-ndjson" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, ct)
	}
	var all bytes.Buffer
	var stderr bytes.Buffer
	stdout := sha256.New()
	n, lines := 0, 0
	var end restapi.ExecStreamEnd
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := rd.ReadBytes('\n')
		all.Write(line)
		if err != nil {
			t.Fatalf("the stream ended without its last line after %d lines: %v", lines, err)
		}
		lines++
		var l struct {
			restapi.ExecStreamEnd
			Stream  string  `json:"stream"`
			Data    *string `json:"data"`
			DataB64 []byte  `json:"data_b64"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("line %d: %v", lines, err)
		}
		if l.Stream == "" {
			end = l.ExecStreamEnd
			break
		}
		data := l.DataB64
		if l.Data != nil {
			data = []byte(*l.Data)
		}
		switch l.Stream {
		case "stdout":
			stdout.Write(data)
			n += len(data)
		case "stderr":
			stderr.Write(data)
		default:
			t.Fatalf("line %d: stream %q", lines, l.Stream)
		}
	}
	if extra, _ := rd.ReadBytes('\n'); len(extra) != 0 {
		t.Fatalf("bytes after the last line: %q", extra)
	}
	got := hex.EncodeToString(stdout.Sum(nil))
	want, _, _ := strings.Cut(stderr.String(), " ")
	if n != 1<<20 || got != want {
		t.Fatalf("streamed %d bytes with sha256 %s; the file's sha256sum: %q", n, got, stderr.String())
	}
	if end.ExitCode == nil || *end.ExitCode != 7 || end.Success == nil || *end.Success || end.Truncated == nil || *end.Truncated ||
		end.AgentId != "host-01" || !strings.HasPrefix(end.CommandId, "ex-") || end.Code != nil {
		t.Fatalf("last line %s", apicontract.Clip(bytes.TrimSpace(all.Bytes()[bytes.LastIndexByte(bytes.TrimSpace(all.Bytes()), '\n')+1:])))
	}
	if err := apicontract.CheckResponse(resp.Request, resp.StatusCode, resp.Header, all.Bytes()); err != nil {
		t.Fatal(err)
	}
	t.Logf("1 MiB streamed in %d lines", lines)
}

// execRandomMiB POSTs …/exec of host-01 asking for accept: a command that
// writes 1 MiB of random bytes to stdout and to file, the file's sha256sum
// to stderr, and exits 7. The caller reads and closes the answer.
func execRandomMiB(t *testing.T, s *harness.Server, accept string) *http.Response {
	t.Helper()
	file := filepath.Join(t.TempDir(), "random")
	body, err := json.Marshal(restapi.ExecRequest{
		Command: "sh",
		Args:    ptr([]string{"-c", `head -c 1048576 /dev/urandom | tee "$1"; sha256sum < "$1" >&2; exit 7`, "sh", file}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "POST", s.RESTURL+"/api/v1/agents/host-01/exec", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
