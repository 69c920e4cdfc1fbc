package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// allowed is everything outside the standard library the client may
// compile in: the generated code's runtime and what that imports. Nothing
// of the server (its module, gen/restapi, kin-openapi, adapters, core) may
// be reached; adding to this list is a decision for the README's
// "Go client" paragraph too.
var allowed = []string{
	"github.com/agentic-sandbox/agentic-sandbox/client", // itself
	"github.com/oapi-codegen/runtime",                   // parameter styles, types (the generated code's runtime)
	"github.com/google/uuid",                            // runtime/types.UUID
	"github.com/apapsch/go-jsonmerge/v2",                // runtime: unions
}

// forbidden names what the server pulls in, as a second check that the
// allowed list stays a list of the client's own needs.
var forbidden = []string{
	"github.com/agentic-sandbox/agentic-sandbox/gen",
	"github.com/agentic-sandbox/agentic-sandbox/adapters",
	"github.com/agentic-sandbox/agentic-sandbox/core",
	"github.com/agentic-sandbox/agentic-sandbox/internal",
	"github.com/agentic-sandbox/agentic-sandbox/ports",
	"github.com/getkin/kin-openapi",
}

func within(path string, roots []string) bool {
	for _, r := range roots {
		if path == r || strings.HasPrefix(path, r+"/") {
			return true
		}
	}
	return false
}

// TestDependencies: the package and its tests compile in nothing beyond the
// standard library and the allowed list.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-test",
		"-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var seen []string
	for _, p := range strings.Fields(strings.ReplaceAll(string(out), " [", "\n[")) {
		if strings.HasPrefix(p, "[") {
			continue // "client_test [client.test]": the variant built for the test
		}
		// The test binary's own packages: client_test, client.test.
		p = strings.TrimSuffix(strings.TrimSuffix(p, ".test"), "_test")
		seen = append(seen, p)
		if within(p, forbidden) || !within(p, allowed) {
			t.Errorf("the client reaches %s, which is neither the standard library nor allowed", p)
		}
	}
	if !within("github.com/oapi-codegen/runtime", seen) {
		t.Fatalf("go list saw no runtime: %q", seen)
	}
}
