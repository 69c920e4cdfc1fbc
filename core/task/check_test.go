package task

import (
	"errors"
	"strings"
	"testing"
)

// A manifest may name only the runtimes the server's catalog has; the
// parser knows none of them.
func TestCheckTakesTheServersRuntimes(t *testing.T) {
	s := &Service{cfg: Config{Runtimes: []string{"host", "docker"}}}
	if _, err := s.Check([]byte(`{claude: {prompt: x}, environment: {runtime: docker}}`)); err != nil {
		t.Fatalf("docker: %v", err)
	}
	if _, err := s.Check([]byte(`{claude: {prompt: x}}`)); err != nil {
		t.Fatalf("no runtime: %v", err)
	}
	_, err := s.Check([]byte(`{claude: {prompt: x}, environment: {runtime: firecracker}}`))
	if !errors.Is(err, ErrInvalidManifest) || !strings.Contains(err.Error(), "environment.runtime: must be one of host, docker") {
		t.Fatalf("firecracker: %v", err)
	}
}
