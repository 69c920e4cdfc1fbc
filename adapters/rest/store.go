package rest

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// entry is a background command started through this API, with the tail of
// its output.
type entry struct {
	agentID string
	pty     bool

	mu      sync.Mutex
	id      string
	cmd     ports.Command
	stdout  ring
	stderr  ring
	changed chan struct{} // closed and replaced on every change, to wake long polls
	ended   bool
	// stdinClosed is set once eof was written, to answer later writes clearly.
	stdinClosed bool
	endedAt     time.Time
	result      ports.CommandResult
}

func newEntry(agentID string, maxOut int, pty bool) *entry {
	return &entry{
		agentID: agentID,
		pty:     pty,
		stdout:  ring{max: maxOut},
		stderr:  ring{max: maxOut},
		changed: make(chan struct{}),
	}
}

// onOutput is the command's OnOutput; it may run before Start returns.
func (e *entry) onOutput(ch ports.OutputChunk) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ch.Stream == ports.StreamStderr {
		e.stderr.write(ch.Data)
	} else {
		e.stdout.write(ch.Data)
	}
	e.wakeLocked()
}

func (e *entry) finish(r ports.CommandResult, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ended, e.endedAt, e.result = true, now, r
	e.wakeLocked()
}

func (e *entry) wakeLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// wait blocks until the command ends, output arrives beyond the given
// offsets, d passes, or ctx ends. An offset past the end means "from now
// on": it is clamped to the end, so any new output wakes the wait, and the
// clamped offsets are returned for reading.
func (e *entry) wait(ctx context.Context, stdoutFrom, stderrFrom int64, d time.Duration) (int64, int64) {
	e.mu.Lock()
	stdoutFrom, stderrFrom = min(stdoutFrom, e.stdout.end), min(stderrFrom, e.stderr.end)
	e.mu.Unlock()
	if d <= 0 {
		return stdoutFrom, stderrFrom
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		e.mu.Lock()
		ready := e.ended || e.stdout.end > stdoutFrom || e.stderr.end > stderrFrom
		ch := e.changed
		e.mu.Unlock()
		if ready {
			return stdoutFrom, stderrFrom
		}
		select {
		case <-ch:
		case <-t.C:
			return stdoutFrom, stderrFrom
		case <-ctx.Done():
			return stdoutFrom, stderrFrom
		}
	}
}

// status returns the command's state and its output from the given offsets.
func (e *entry) status(stdoutFrom, stderrFrom int64) restapi.CommandStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	out, outOff := e.stdout.read(stdoutFrom, maxPollBytes)
	errb, errOff := e.stderr.read(stderrFrom, maxPollBytes)
	// More may follow while running or when this poll was capped; hold back
	// a split character until then.
	if !e.ended || outOff+int64(len(out)) < e.stdout.end {
		out = holdBackPartialRune(out)
	}
	if !e.ended || errOff+int64(len(errb)) < e.stderr.end {
		errb = holdBackPartialRune(errb)
	}
	so, se, enc := encodeOutput(out, errb)
	st := restapi.CommandStatus{
		CommandId:    e.id,
		AgentId:      e.agentID,
		State:        restapi.CommandStateRunning,
		Stdout:       so,
		Stderr:       se,
		StdoutOffset: outOff,
		StderrOffset: errOff,
		Encoding:     enc,
	}
	if e.ended {
		st.State = restapi.CommandStateExited
		truncated := e.stdout.start() > 0 || e.stderr.start() > 0
		// The output is in the status itself; the result carries none of it
		// so a response does not hold the output twice.
		r := execResult(e.id, e.agentID, e.result, nil, nil, truncated)
		st.Result = &r
	}
	return st
}

// commandStore holds background commands; finished ones are forgotten
// RetainFinished after their end, checked lazily on every access.
type commandStore struct {
	clock ports.Clock
	mu    sync.Mutex
	m     map[string]*entry
}

func newCommandStore(c ports.Clock) *commandStore {
	return &commandStore{clock: c, m: map[string]*entry{}}
}

func (s *commandStore) add(id string, e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked()
	s.m[id] = e
}

func (s *commandStore) get(id string) (*entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked()
	e, ok := s.m[id]
	return e, ok
}

func (s *commandStore) sweepLocked() {
	now := s.clock.Now()
	type done struct {
		id string
		at time.Time
	}
	var finished []done
	for id, e := range s.m {
		e.mu.Lock()
		ended, at := e.ended, e.endedAt
		e.mu.Unlock()
		if !ended {
			continue
		}
		if now.Sub(at) >= RetainFinished {
			delete(s.m, id)
			continue
		}
		finished = append(finished, done{id, at})
	}
	if over := len(finished) - maxRetainedFinished; over > 0 {
		sort.Slice(finished, func(i, j int) bool { return finished[i].at.Before(finished[j].at) })
		for _, f := range finished[:over] {
			delete(s.m, f.id)
		}
	}
}
