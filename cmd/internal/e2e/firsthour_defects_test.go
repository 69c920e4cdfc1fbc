package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/docker"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// Defects a new user met in the first hour (issue 27), each tried the way
// that user did.

// A root server's PATH starts with a directory only root may enter (as
// root's /root/go/bin is): its host agents, run as users of their own, do
// not get it, and a program found nowhere is "not found" (127) as the
// README says, not "permission denied" (126) on root's directory.
func TestMissingProgramOnARootServersHostAgentIsNotFound(t *testing.T) {
	needRoot(t)
	// 0700, in a 0700 directory: root's alone.
	rootOnly := t.TempDir()
	if err := os.WriteFile(filepath.Join(rootOnly, "firsthour-roots-tool"), []byte("#!/bin/sh\necho root's\n"), 0o755); err != nil { //nolint:gosec // a program
		t.Fatal(err)
	}
	s := startServer(t, 1, "", defaultHostUsers, "PATH="+rootOnly+":"+os.Getenv("PATH"))
	createHostEnv(t, s, "fh-path")
	for _, agent := range []string{"host-01", "fh-path"} {
		for _, prog := range []string{"firsthour-no-such-program", "firsthour-roots-tool"} {
			out, errOut, code := ctl(t, s.RESTURL, s.Token, "exec", agent, "--", prog)
			if code != 127 || !strings.Contains(errOut, "not found") || !strings.Contains(errOut, prog) {
				t.Errorf("%s: exec %s: exit %d, stdout %q, stderr %q; want 127 and %q not found", agent, prog, code, out, errOut, prog)
			}
		}
		r := execOK(t, s, agent, restapi.ExecRequest{Command: "firsthour-no-such-program"})
		if r.ExitCode != 127 || r.Error == nil || *r.Error != `command not found: "firsthour-no-such-program"` {
			t.Errorf("%s: REST exec of a missing program: %+v", agent, r)
		}
		// Its PATH is one its user can use: without root's directory,
		// with the system's programs.
		stdout, _ := shell(t, s, agent, `echo "$PATH"; command -v sh`)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if len(lines) != 2 || strings.Contains(lines[0], rootOnly) || !strings.HasSuffix(lines[1], "/sh") {
			t.Errorf("%s: PATH and sh: %q", agent, stdout)
		}
	}
}

// `sessions create --type interactive AGENT` with no command is the
// agent's shell, as the README says (and so is a REST create without
// one); the other types still need a command, and say so.
func TestInteractiveSessionWithoutACommandIsTheAgentsShell(t *testing.T) {
	s := startServer(t, 1, "")
	out, errOut, code := ctl(t, s.RESTURL, s.Token, "sessions", "create", "--type", "interactive", "--name", "myshell", "host-01")
	if code != 0 {
		t.Fatalf("sessions create --type interactive host-01: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	id := strings.TrimSpace(out)
	got, err := s.Client().GetSessionWithResponse(context.Background(), id)
	if err != nil || got.JSON200 == nil || got.JSON200.Type != restapi.SessionInteractive || got.JSON200.Command != "" || got.JSON200.Name != "myshell" {
		t.Fatalf("the session: %v %s", err, got.Body)
	}
	tm := attach(t, s, id)
	tm.typeUntil(t, "echo $((6*7))\r", regexp.MustCompile(`\b42\b`))
	if err := tm.proc.WriteStdin([]byte{0x1d}); err != nil { // detach
		t.Fatal(err)
	}
	if r := tm.ended(t, "on the detach key"); r.ExitCode != 0 {
		t.Fatalf("attach ended with %+v:\n%q", r, tm.output())
	}
	// The same over REST, without "command".
	interactive := restapi.SessionInteractive
	if sess := createSession(t, s, "host-01", restapi.CreateSessionRequest{Type: &interactive}); sess.Command != "" || sess.Type != interactive {
		t.Fatalf("REST create without a command: %+v", sess)
	}

	// A background or headless session has nothing to run without one.
	for _, typ := range []string{"background", "headless"} {
		out, errOut, code = ctl(t, s.RESTURL, s.Token, "sessions", "create", "--type", typ, "host-01")
		if code != 1 || out != "" || !strings.Contains(errOut, "needs a command") || !strings.Contains(errOut, "--type interactive") {
			t.Errorf("sessions create --type %s host-01: exit %d, stdout %q, stderr %q", typ, code, out, errOut)
		}
		st := restapi.SessionType(typ)
		resp, err := s.Client().CreateSessionWithResponse(context.Background(), "host-01", restapi.CreateSessionRequest{Type: &st})
		if err != nil || resp.StatusCode() != 400 || !strings.Contains(string(resp.Body), `"invalid_request"`) || !strings.Contains(string(resp.Body), "command") {
			t.Errorf("REST create of a %s session without a command: %v %d %s", typ, err, resp.StatusCode(), resp.Body)
		}
	}
}

// workingDir checks, on agent, what the README and `agenticctl cp --help`
// promise on every runtime: relative paths start in the agent's working
// directory, the one its commands start in, which they may write; `cp F
// AGENT:NAME` makes NAME there, `cp F AGENT:DIR/` puts F into DIR (made if
// missing), `ls AGENT:` lists it. It returns that directory and the
// commands' HOME.
func workingDir(t *testing.T, s *harness.Server, agent string) (wd, home string) {
	t.Helper()
	out, _ := shell(t, s, agent, `pwd; echo "$HOME"`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !filepath.IsAbs(lines[0]) {
		t.Fatalf("%s: pwd and HOME: %q", agent, out)
	}
	wd, home = lines[0], lines[1]
	local := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(local, []byte("first hour\n"), 0o644); err != nil { //nolint:gosec // a test file
		t.Fatal(err)
	}
	for _, dst := range []string{agent + ":work", agent + ":sub/"} {
		if out, errOut, code := ctl(t, s.RESTURL, s.Token, "cp", local, dst); code != 0 {
			t.Fatalf("cp %s %s: exit %d %q %q", local, dst, code, out, errOut)
		}
	}
	got, errOut := shell(t, s, agent, `cat work sub/notes.txt; ls -ld "$PWD/work" | cut -c1`)
	if got != "first hour\nfirst hour\n-\n" {
		t.Fatalf("%s: in the working directory %s: %q %q; want the file as work and sub/notes.txt", agent, wd, got, errOut)
	}
	out, errOut, code := ctl(t, s.RESTURL, s.Token, "ls", "--json", agent+":")
	var listing restapi.FileListing
	if code != 0 || json.Unmarshal([]byte(out), &listing) != nil || listing.Path != wd {
		t.Fatalf("%s: ls --json %s: exit %d %q %q; want the listing of %s", agent, agent+":", code, out, errOut, wd)
	}
	return wd, home
}

// Host agents: relative paths start in the directory their commands start
// in, under a root server (each agent's user in its own home) as under the
// harness's single user.
func TestRelativePathsStartInTheWorkingDirectoryOnHostAgents(t *testing.T) {
	t.Run("harness user", func(t *testing.T) {
		s := startServer(t, 1, "")
		createHostEnv(t, s, "fh-wd")
		for _, agent := range []string{"host-01", "fh-wd"} {
			workingDir(t, s, agent)
		}
	})
	t.Run("users of their own", func(t *testing.T) {
		needRoot(t)
		s := startServer(t, 1, "", defaultHostUsers)
		createHostEnv(t, s, "fh-wd")
		for _, agent := range []string{"host-01", "fh-wd"} {
			if wd, home := workingDir(t, s, agent); wd != home {
				t.Errorf("%s: working directory %s, HOME %s: want its own home", agent, wd, home)
			}
		}
	})
}

// A container's commands run as nobody, who has no home in most images:
// their working directory and HOME are /tmp whatever the image's passwd
// says (Debian's nobody has /nonexistent, which made them start in an
// unwritable /), so `cp f dev-1:work` works as on a host environment.
func TestRelativePathsStartInTheWorkingDirectoryInContainers(t *testing.T) {
	host := privateDockerd(t)
	s := startServer(t, 0, "", "DOCKER_HOST="+host, "AGENTIC_RUNTIMES=host,docker")
	const image = "agentic-sandbox-test/nobody-nonexistent:1"
	importImage(t, host, image, "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
	if out, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "create", "--runtime", "docker", "--image", image, "dk-wd"); code != 0 {
		t.Fatalf("create: exit %d %q %q", code, out, errOut)
	}
	if wd, home := workingDir(t, s, "dk-wd"); wd != "/tmp" || home != "/tmp" {
		t.Fatalf("working directory %s, HOME %s: want /tmp for both", wd, home)
	}
}

// importImage imports into the dockerd at host, as tag, the default
// image's static busybox root with its passwd's nobody line replaced.
func importImage(t *testing.T, host, tag, nobody string) {
	t.Helper()
	bb := "/bin/busybox"
	if _, err := os.Stat(bb); err != nil {
		bb = "/usr/bin/busybox"
	}
	rootfs, err := docker.BusyboxRootfs(bb)
	if err != nil {
		t.Fatalf("busybox root (make test-env installs busybox): %v", err)
	}
	var out bytes.Buffer
	tr, tw := tar.NewReader(bytes.NewReader(rootfs)), tar.NewWriter(&out)
	replaced := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(h.Name, "./") == "etc/passwd" {
			var lines []string
			for _, l := range strings.SplitAfter(string(body), "\n") {
				if strings.HasPrefix(l, "nobody:") {
					l, replaced = nobody, true
				}
				lines = append(lines, l)
			}
			body = []byte(strings.Join(lines, ""))
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if !replaced {
		t.Fatal("the default image's root has no nobody in etc/passwd")
	}
	cmd := exec.Command("docker", "-H", host, "import", "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "-", tag)
	cmd.Stdin = &out
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker import: %v %s", err, b)
	}
}
