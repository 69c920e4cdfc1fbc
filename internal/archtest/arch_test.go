// Package archtest checks the dependency rules of docs/architecture.md on
// the real import graph, so that a change that breaks them fails `make
// test` instead of waiting for a reviewer.
package archtest

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/agentic-sandbox/agentic-sandbox/"

// worldPackages reach files, processes or the network: core and ports go
// through ports for those.
var worldPackages = []string{"os", "os/exec", "net", "net/http", "syscall", "io/ioutil", "path/filepath"}

// imports maps each package of the module (relative path) to its direct imports
// (module packages relative, standard library as is).
func imports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	graph := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		pkg := strings.TrimPrefix(fields[0], module)
		for _, imp := range fields[1:] {
			graph[pkg] = append(graph[pkg], strings.TrimPrefix(imp, module))
		}
		if _, ok := graph[pkg]; !ok {
			graph[pkg] = nil
		}
	}
	if len(graph) < 20 {
		t.Fatalf("go list found only %d packages", len(graph))
	}
	return graph
}

func layer(pkg string) string {
	first, _, _ := strings.Cut(pkg, "/")
	return first
}

func TestDependencyRules(t *testing.T) {
	graph := imports(t)
	for pkg, deps := range graph {
		for _, dep := range deps {
			if why := forbidden(graph, pkg, dep); why != "" {
				t.Errorf("%s imports %s: %s", pkg, dep, why)
			}
		}
	}
}

// forbidden says why pkg may not import dep, or "".
func forbidden(graph map[string][]string, pkg, dep string) string {
	_, own := graph[dep]
	if dep == "ports/portsfake" && !strings.HasSuffix(pkg, "test") {
		// Fakes serve tests and the test helper packages (resttest, portstest) only.
		return "only tests and test helpers use the fakes"
	}
	switch layer(pkg) {
	case "core", "ports":
		if own && slices.Contains([]string{"adapters", "gen", "cmd"}, layer(dep)) {
			return "core and ports depend on ports and core only"
		}
		if slices.Contains(worldPackages, dep) && !strings.HasSuffix(pkg, "/portstest") {
			return "core and ports reach the world through ports"
		}
		if own && layer(dep) == "internal" {
			for _, d := range graph[dep] {
				if slices.Contains(worldPackages, d) || layer(d) == "gen" {
					return "this internal package does I/O or speaks the wire format: only adapters may use it"
				}
			}
		}
	case "adapters":
		if own && layer(dep) == "adapters" && adapterOf(dep) != adapterOf(pkg) {
			return "an adapter never imports another adapter (shared plumbing goes to internal/)"
		}
		if own && layer(dep) == "cmd" {
			return "adapters do not depend on binaries"
		}
	case "internal":
		if own && slices.Contains([]string{"adapters", "cmd", "core"}, layer(dep)) {
			return "internal/ is plumbing below every layer"
		}
	}
	return ""
}

func adapterOf(pkg string) string {
	parts := strings.SplitN(pkg, "/", 3)
	if len(parts) < 2 {
		return pkg
	}
	return parts[1]
}

// The rule must be able to fail: a graph that breaks each rule is caught.
func TestDependencyRulesCatchViolations(t *testing.T) {
	graph := map[string][]string{
		"core/mission":        {"adapters/rest", "net/http", "internal/atomicfile"},
		"adapters/docker":     {"adapters/hostsup", "adapters/docker/sub"},
		"adapters/docker/sub": nil,
		"adapters/rest":       nil,
		"adapters/hostsup":    nil,
		"internal/atomicfile": {"os"},
		"ports":               {"gen/restapi"},
		"gen/restapi":         nil,
	}
	cases := []struct {
		pkg, dep string
		bad      bool
	}{
		{"core/mission", "adapters/rest", true},
		{"core/mission", "net/http", true},
		{"core/mission", "internal/atomicfile", true},
		{"adapters/docker", "adapters/hostsup", true},
		{"adapters/docker", "adapters/docker/sub", false},
		{"ports", "gen/restapi", true},
		{"adapters/rest", "gen/restapi", false},
		{"adapters/rest", "ports/portsfake", true},
		{"adapters/rest/resttest", "ports/portsfake", false},
	}
	for _, c := range cases {
		if got := forbidden(graph, c.pkg, c.dep) != ""; got != c.bad {
			t.Errorf("%s -> %s: forbidden=%v, want %v", c.pkg, c.dep, got, c.bad)
		}
	}
}
