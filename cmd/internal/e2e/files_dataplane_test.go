package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// File bytes go on the data plane for an agent that offers it (a host
// agent of this build) and in Transfer messages for one that does not (an
// agent started with AGENT_NO_FILE_DATA_PLANE=1, as one from before it
// registers): both move the same files and trees both ways with the same
// bytes, and give the same typed errors, and a refused upload leaves
// nothing on either.
func TestFilesWithAndWithoutTheDataPlane(t *testing.T) {
	dataDir := t.TempDir()
	s := startServer(t, 1, dataDir, "AGENTIC_FILE_MAX_BYTES=8388608")
	agentSecret(t, dataDir, "old-1", "old-secret")
	startAgent(t, "old-1", "old-secret", s.AgentURL, "AGENT_NO_FILE_DATA_PLANE=1")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := s.WaitAgents(ctx, "old-1"); err != nil {
		t.Fatalf("an agent without the data plane: %v", err)
	}
	for _, agent := range []string{"host-01", "old-1"} {
		dir := t.TempDir()
		for _, size := range []int{0, 1, 3<<20 + 17} {
			data := make([]byte, size)
			_, _ = rand.Read(data)
			remote := filepath.Join(dir, "src", fmt.Sprintf("f%d.bin", size))
			if st, b := fileDo(t, s, http.MethodPut, fileURL(s, agent, "/content", remote), bytes.NewReader(data)); st != http.StatusNoContent {
				t.Fatalf("%s: upload of %d bytes: %d %s", agent, size, st, b)
			}
			st, b := fileDo(t, s, http.MethodGet, fileURL(s, agent, "/content", remote), nil)
			if st != http.StatusOK || sha256.Sum256(b) != sha256.Sum256(data) {
				t.Fatalf("%s: download of %d bytes: %d, %d bytes back", agent, size, st, len(b))
			}
		}
		st, tarball := fileDo(t, s, http.MethodGet, fileURL(s, agent, "/archive", filepath.Join(dir, "src")), nil)
		if st != http.StatusOK {
			t.Fatalf("%s: archive: %d %s", agent, st, tarball)
		}
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, _ = zw.Write(tarball)
		_ = zw.Close()
		dst := filepath.Join(dir, "copy")
		if st, b := fileDo(t, s, http.MethodPut, fileURL(s, agent, "/archive", dst), &gz); st != http.StatusNoContent {
			t.Fatalf("%s: extract: %d %s", agent, st, b)
		}
		sameTree(t, filepath.Join(dir, "src"), dst)
		for _, c := range []struct {
			what, method, url string
			body              []byte
			status            int
			code              string
		}{
			{"missing file", http.MethodGet, fileURL(s, agent, "/content", filepath.Join(dir, "nope")), nil, 404, "file_not_found"},
			{"write over a directory", http.MethodPut, fileURL(s, agent, "/content", dir), []byte("x"), 400, "invalid_path"},
			{"too large", http.MethodPut, fileURL(s, agent, "/content", filepath.Join(dir, "big")), make([]byte, 9<<20), 413, "file_too_large"},
		} {
			var body io.Reader
			if c.body != nil {
				body = bytes.NewReader(c.body)
			}
			st, b := fileDo(t, s, c.method, c.url, body)
			if st != c.status || errorCode(b) != c.code {
				t.Errorf("%s: %s: %d %s, want %d %s", agent, c.what, st, b, c.status, c.code)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "big")); !os.IsNotExist(err) {
			t.Errorf("%s: a refused upload left a file: %v", agent, err)
		}
	}
}

// A VM's agent has one serial link (relayed to the server's agent port):
// the data plane's streams multiplex on it beside the control streams, and
// files and a tree go both ways with the same bytes, typed errors intact.
func TestFilesInAVM(t *testing.T) {
	s, name := readyVM(t, "files-vm")
	filesRoundTripIn(t, s, name)
}

// A container's agent reaches the server through a socket mounted into
// it: the same files and tree both ways.
func TestFilesInDocker(t *testing.T) {
	host := privateDockerd(t)
	s := startServer(t, 0, "", "DOCKER_HOST="+host, "AGENTIC_RUNTIMES=docker")
	name := fmt.Sprintf("files-dk-%d", time.Now().UnixNano()%100000)
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", name) })
	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "docker", name); code != 0 || !strings.Contains(out, name+": ready") {
		t.Fatalf("create %s: exit %d\nstdout %q\nstderr %q", name, code, out, errOut)
	}
	filesRoundTripIn(t, s, name)
}

// filesRoundTripIn moves files of 0 B, 1 B and 5 MiB into environment name
// and back, a tree out as tar and in again, and reads a missing file.
func filesRoundTripIn(t *testing.T, s *harness.Server, name string) {
	t.Helper()
	for _, size := range []int{0, 1, 5<<20 + 3} {
		data := make([]byte, size)
		_, _ = rand.Read(data)
		remote := fmt.Sprintf("/tmp/src/f%d.bin", size)
		if st, b := fileDo(t, s, http.MethodPut, fileURL(s, name, "/content", remote), bytes.NewReader(data)); st != http.StatusNoContent {
			t.Fatalf("upload of %d bytes into %s: %d %s", size, name, st, b)
		}
		st, b := fileDo(t, s, http.MethodGet, fileURL(s, name, "/content", remote), nil)
		if st != http.StatusOK || sha256.Sum256(b) != sha256.Sum256(data) {
			t.Fatalf("download of %d bytes from %s: %d, %d bytes back", size, name, st, len(b))
		}
	}
	st, tarball := fileDo(t, s, http.MethodGet, fileURL(s, name, "/archive", "/tmp/src"), nil)
	if st != http.StatusOK {
		t.Fatalf("archive from %s: %d %s", name, st, tarball)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(tarball)
	_ = zw.Close()
	if st, b := fileDo(t, s, http.MethodPut, fileURL(s, name, "/archive", "/tmp/copy"), &gz); st != http.StatusNoContent {
		t.Fatalf("extract in %s: %d %s", name, st, b)
	}
	l := listing(t, s, name, "/tmp/copy")
	if len(l.Entries) != 3 {
		t.Errorf("the extracted tree in %s: %+v", name, l)
	}
	for _, e := range l.Entries {
		if e.Name == "f5242883.bin" && e.Size != 5<<20+3 {
			t.Errorf("extracted %s: %d bytes", e.Name, e.Size)
		}
	}
	if st, b := fileDo(t, s, http.MethodGet, fileURL(s, name, "/content", "/tmp/nope"), nil); st != 404 || errorCode(b) != "file_not_found" {
		t.Errorf("a missing file in %s: %d %s", name, st, b)
	}
}

// readyVM starts a server with the libvirt runtime and a VM named prefix-N
// on it, ready (its agent registered over its serial link); the VM is
// removed at the test's end.
func readyVM(t *testing.T, prefix string) (*harness.Server, string) {
	t.Helper()
	harness.NeedEngine(t, "libvirt") // libvirtd started when it is not
	s := startLibvirtServer(t)
	name := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%100000)
	t.Cleanup(func() { ctl(t, s.RESTURL, s.Token, "env", "rm", name) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	created, err := s.Client().CreateEnvironmentWithResponse(ctx, restapi.CreateEnvironmentRequest{Runtime: "libvirt", Name: name})
	if err != nil || created.JSON202 == nil {
		t.Fatalf("create: %v %s", err, created.Body)
	}
	waitEnvReady(t, s, name, 3*time.Minute)
	return s, name
}
