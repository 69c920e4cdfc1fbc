//go:build tools

// Package tools pins the gVisor commands test/k8s/build-gvisor.sh builds, so
// that go.sum is complete for them.
package tools

import (
	_ "gvisor.dev/gvisor/runsc"
	_ "gvisor.dev/gvisor/shim"
)
