package procexec

import (
	"strconv"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// The child's stdout and stderr are the blocking write ends of their pipes
// (outputPipe makes them non-blocking first, for the agent's read end): a
// program handed a non-blocking stdout gets EAGAIN from a write to a full
// pipe and many treat that as a write error. Its stdin is the shared
// /dev/null, read-only, still open for every command after the first.
func TestChildStdioModes(t *testing.T) {
	t.Parallel()
	for range 2 { // the second command gets the same shared /dev/null
		r, c := run(t, sh(`for fd in 0 1 2; do printf '%s %s %s\n' $fd "$(sed -n 's/^flags:[[:space:]]*//p' /proc/$$/fdinfo/$fd)" "$(readlink /proc/$$/fd/$fd)"; done; cat`))
		if r.ExitCode != 0 {
			t.Fatalf("result %+v, stderr %q", r, c.get(ports.StreamStderr))
		}
		lines := strings.Split(strings.TrimSpace(c.get(ports.StreamStdout)), "\n")
		if len(lines) != 3 {
			t.Fatalf("stdout %q", c.get(ports.StreamStdout))
		}
		for fd, line := range lines {
			f := strings.Fields(line)
			if len(f) != 3 {
				t.Fatalf("fd %d: %q", fd, line)
			}
			flags, err := strconv.ParseUint(f[1], 8, 32)
			if err != nil {
				t.Fatalf("fd %d: flags %q: %v", fd, f[1], err)
			}
			if flags&0o4000 != 0 { // O_NONBLOCK
				t.Errorf("fd %d is non-blocking (flags %s) %q", fd, f[1], lines)
			}
			switch fd {
			case 0:
				if f[2] != "/dev/null" || flags&0o3 != 0 { // O_RDONLY
					t.Errorf("stdin %q flags %s, want /dev/null read-only", f[2], f[1])
				}
			default:
				if !strings.HasPrefix(f[2], "pipe:") || flags&0o3 != 1 { // O_WRONLY
					t.Errorf("fd %d %q flags %s, want a pipe's write end", fd, f[2], f[1])
				}
			}
		}
	}
}
