package runtimetest

import (
	"os"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// TestMain stops the engines shared by the package's tests (the
// Kubernetes test cluster) once they are done.
func TestMain(m *testing.M) {
	code := m.Run()
	harness.StopEngines()
	os.Exit(code)
}
