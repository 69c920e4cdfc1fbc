package harness

import (
	"os"
	"testing"
)

// TestMain stops the engines shared by the package's tests (the
// Kubernetes test cluster) once they are done.
func TestMain(m *testing.M) {
	code := m.Run()
	StopEngines()
	os.Exit(code)
}
