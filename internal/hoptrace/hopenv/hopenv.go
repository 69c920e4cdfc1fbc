// Package hopenv starts hoptrace in a binary when AGENTIC_HOP_TRACE names
// a directory: the marks go to <dir>/<name>-<pid>.hops. For benchmarks
// only (benchrun's terminal part sets it); unset, nothing happens.
package hopenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/internal/hoptrace"
)

// Var is the variable naming the directory.
const Var = "AGENTIC_HOP_TRACE"

// Start starts hoptrace for the binary name if env (KEY=VALUE) sets Var.
func Start(env []string, name string) {
	dir := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, Var+"="); ok {
			dir = v
		}
	}
	if dir == "" {
		return
	}
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%s-%d.hops", name, os.Getpid())), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %s: %v\n", name, Var, err)
		return
	}
	hoptrace.Start(f)
}
