package procexec

import (
	"os"
	"sort"
	"syscall"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Runner implements ports.ProcessRunner with real processes.
type Runner struct {
	// DefaultUser runs every command that names no user (RunAs) as this
	// one: an agent that keeps its secret from its commands runs them as
	// another user.
	DefaultUser string
}

var _ ports.ProcessRunner = Runner{}

// Start runs spec with spec.Env added to this process's environment. A
// command that cannot start comes back as a finished process.
func (r Runner) Start(spec ports.CommandSpec, onOutput func(ports.OutputStream, []byte)) ports.Process {
	if spec.RunAs == "" {
		spec.RunAs = r.DefaultUser
	}
	p, err := Start(Spec{
		Command:   spec.Command,
		Args:      spec.Args,
		Dir:       spec.WorkingDir,
		Env:       mergeEnv(os.Environ(), spec.Env),
		Timeout:   spec.Timeout,
		RunAs:     spec.RunAs,
		PTY:       spec.PTY,
		Cols:      spec.Cols,
		Rows:      spec.Rows,
		Term:      spec.Term,
		StdinOpen: spec.StdinOpen,
	}, onOutput)
	if err != nil {
		return failedProcess{StartFailure(err)}
	}
	return portProcess{p}
}

// mergeEnv overrides base with extra, keeping one entry per key.
func mergeEnv(base []string, extra map[string]string) []string {
	if len(extra) == 0 {
		return base
	}
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k := kv
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				k = kv[:i]
				break
			}
		}
		if _, overridden := extra[k]; !overridden {
			out = append(out, kv)
		}
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+extra[k])
	}
	return out
}

// portProcess adapts *Process to ports.Process (signals as ints).
type portProcess struct{ *Process }

func (p portProcess) Signal(sig int) error { return p.Process.Signal(syscall.Signal(sig)) }

// failedProcess is a command that never started.
type failedProcess struct{ result ports.CommandResult }

func (f failedProcess) Pid() int                  { return 0 }
func (f failedProcess) WriteStdin([]byte) error   { return ErrNoStdin }
func (f failedProcess) CloseStdin() error         { return nil }
func (f failedProcess) Resize(_, _ uint16) error  { return ErrNotPTY }
func (f failedProcess) Signal(int) error          { return nil }
func (f failedProcess) Kill()                     {}
func (f failedProcess) Wait() ports.CommandResult { return f.result }
func (f failedProcess) Done() <-chan struct{}     { return closedChan }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
