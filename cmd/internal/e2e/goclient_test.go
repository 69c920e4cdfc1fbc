package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/client"
	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// TestGoClient drives the real server with the Go client package
// (client/): the token by option, the generated calls, and refusals as
// *client.APIError with the server's code.
func TestGoClient(t *testing.T) {
	s := startServer(t, 1, "")
	c, err := client.New(s.RESTURL, client.WithToken(s.Token))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()

	t.Run("list agents", func(t *testing.T) {
		r, err := c.ListAgentsWithResponse(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(r.JSON200.Agents, func(a client.Agent) bool { return a.Id == "host-01" })
		if i < 0 {
			t.Fatalf("host-01 not listed: %s", r.Body)
		}
		if a := r.JSON200.Agents[i]; a.Runtime != client.AgentRuntime("host") || a.Status == client.Disconnected {
			t.Fatalf("host-01: %+v", a)
		}
	})

	t.Run("exec", func(t *testing.T) {
		r, err := c.ExecCommandWithResponse(ctx, "host-01", client.ExecRequest{
			Command: "sh",
			Args:    client.Ptr([]string{"-c", "tr a-z A-Z; echo oops >&2; exit 3"}),
			Stdin:   client.Ptr("from the go client\n"),
		})
		if err != nil {
			t.Fatal(err)
		}
		res := r.JSON200
		if res == nil || res.Stdout != "FROM THE GO CLIENT\n" || res.Stderr != "oops\n" || res.ExitCode != 3 || res.Success {
			t.Fatalf("got %d %s", r.StatusCode(), r.Body)
		}
	})

	t.Run("errors carry the code", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			call   func(*client.ClientWithResponses) error
			status int
			code   string
		}{
			{"unknown agent", func(c *client.ClientWithResponses) error {
				_, err := c.GetAgentWithResponse(ctx, "no-such-agent")
				return err
			}, 404, "agent_not_found"},
			{"exec on an unknown agent", func(c *client.ClientWithResponses) error {
				_, err := c.ExecCommandWithResponse(ctx, "no-such-agent", client.ExecRequest{Command: "true"})
				return err
			}, 404, "agent_not_found"},
			{"invalid request", func(c *client.ClientWithResponses) error {
				_, err := c.ExecCommandWithResponse(ctx, "host-01", client.ExecRequest{Command: ""})
				return err
			}, 400, "invalid_request"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := tc.call(c)
				var e *client.APIError
				if !errors.As(err, &e) {
					t.Fatalf("want *client.APIError, got %T %v", err, err)
				}
				if e.StatusCode != tc.status || e.Code != tc.code || e.Message == "" || client.ErrorCode(err) != tc.code {
					t.Fatalf("got %+v", e)
				}
			})
		}
	})

	t.Run("wrong token", func(t *testing.T) {
		bad, err := client.New(s.RESTURL, client.WithToken("not-"+s.Token))
		if err != nil {
			t.Fatal(err)
		}
		_, err = bad.ListAgentsWithResponse(ctx, nil)
		var e *client.APIError
		if !errors.As(err, &e) || e.StatusCode != 401 || e.Code != "unauthorized" {
			t.Fatalf("got %T %v", err, err)
		}
	})
}

// goCmd runs the go command in dir with env added, bounded generously (it
// may compile on a loaded machine), and returns its stdout.
func goCmd(t *testing.T, dir string, env []string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off"), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("go %s (in %s): %v\n%s%s", strings.Join(args, " "), dir, err, out.String(), errOut.String())
	}
	return out.Bytes()
}

func clientDir(t *testing.T) string {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "client")
}

// TestGoClientModule runs the client module's own vet and tests (it is a
// module of its own, outside `go test ./...` of this one): its unit tests,
// TestDependencies (go list -deps against the allowed list) and the
// examples of its doc, compiled.
func TestGoClientModule(t *testing.T) {
	dir := clientDir(t)
	goCmd(t, dir, nil, "vet", "./...")
	out := goCmd(t, dir, nil, "test", "-count=1", "-v", "./...")
	for _, name := range []string{"TestDependencies", "TestAPIError", "TestTokenAndBody"} {
		if !bytes.Contains(out, []byte("--- PASS: "+name+" ")) {
			t.Errorf("%s did not pass:\n%s", name, out)
		}
	}
}

// TestGoClientOutsideModule is what `go get` of the client gives a module
// of someone else's: a program using it builds, its go.mod requires only
// the client and the generated code's runtime, and its module graph holds
// nothing of this server's (not this module, not kin-openapi, not any of
// the server's direct dependencies but the runtime's own). The client comes
// from this tree by a replace; the rest from the module cache, which this
// module's build has filled with the same versions.
func TestGoClientOutsideModule(t *testing.T) {
	dir := clientDir(t)
	out := t.TempDir()
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"go.mod": "module example.com/outside\n\ngo 1.26.0\n\n" +
			"require github.com/agentic-sandbox/agentic-sandbox/client v0.0.0\n\n" +
			"replace github.com/agentic-sandbox/agentic-sandbox/client => " + dir + "\n",
		"go.sum": string(sum),
		"main.go": `package main

import (
	"context"
	"fmt"
	"os"

	"github.com/agentic-sandbox/agentic-sandbox/client"
)

func main() {
	c, err := client.New(os.Args[1], client.WithToken(os.Args[2]))
	if err != nil {
		panic(err)
	}
	r, err := c.ListAgentsWithResponse(context.Background(), nil)
	fmt.Println(r, err, client.ErrorCode(err))
}
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(out, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	modEnv := []string{"GOFLAGS=-mod=mod"}
	goCmd(t, out, modEnv, "mod", "tidy")
	goCmd(t, out, modEnv, "build", "-o", filepath.Join(t.TempDir(), "outside"), ".")

	// What its go.mod requires.
	var mod struct {
		Require []struct{ Path string }
	}
	if err := json.Unmarshal(goCmd(t, out, modEnv, "mod", "edit", "-json"), &mod); err != nil {
		t.Fatal(err)
	}
	var required []string
	for _, r := range mod.Require {
		required = append(required, r.Path)
	}
	slices.Sort(required)
	want := []string{
		"github.com/agentic-sandbox/agentic-sandbox/client",
		"github.com/apapsch/go-jsonmerge/v2",
		"github.com/google/uuid",
		"github.com/oapi-codegen/runtime",
	}
	if !slices.Equal(required, want) {
		t.Errorf("go.mod of a module using the client requires %q, want %q", required, want)
	}

	// Its module graph against the server's direct dependencies.
	var graph []string
	for _, m := range strings.Fields(string(goCmd(t, out, modEnv, "mod", "graph"))) {
		path, _, _ := strings.Cut(m, "@")
		if !slices.Contains(graph, path) {
			graph = append(graph, path)
		}
	}
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	var server struct {
		Module  struct{ Path string }
		Require []struct {
			Path     string
			Indirect bool
		}
	}
	if err := json.Unmarshal(goCmd(t, root, nil, "mod", "edit", "-json"), &server); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(graph, "github.com/oapi-codegen/runtime") {
		t.Fatalf("module graph without the runtime: %q", graph)
	}
	forbidden := []string{server.Module.Path, "github.com/getkin/kin-openapi"}
	for _, r := range server.Require {
		if !r.Indirect && !slices.Contains(want, r.Path) {
			forbidden = append(forbidden, r.Path)
		}
	}
	for _, m := range forbidden {
		if slices.Contains(graph, m) {
			t.Errorf("a module using the client has the server's %s in its module graph", m)
		}
	}

	// The packages its program compiles in.
	pkgs := strings.Fields(string(goCmd(t, out, modEnv, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")))
	for _, p := range pkgs {
		if p == "example.com/outside" {
			continue
		}
		if !slices.ContainsFunc(want, func(m string) bool { return p == m || strings.HasPrefix(p, m+"/") }) {
			t.Errorf("a program using the client compiles in %s", p)
		}
	}
}
