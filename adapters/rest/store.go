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
	// released is set when the store let the finished command go: its
	// output is dropped, and whatever still arrives is too.
	released bool
	// adopted: started by an earlier run of the server (AdoptCommand); its
	// output here starts where the agent's first chunk to this server does.
	adopted bool
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
	if e.released {
		return
	}
	r := &e.stdout
	if ch.Stream == ports.StreamStderr {
		r = &e.stderr
	}
	if e.adopted && r.end == 0 && r.n == 0 {
		r.end = int64(ch.Offset) //nolint:gosec // offsets count bytes, far below 2^63
	}
	r.write(ch.Data)
	e.wakeLocked()
}

func (e *entry) finish(r ports.CommandResult, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ended, e.endedAt, e.result = true, now, r
	// What a finished command holds is counted against the store's bound:
	// no more than its output.
	e.stdout.compact()
	e.stderr.compact()
	e.wakeLocked()
}

func (e *entry) release() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.released = true
	e.stdout.release()
	e.stderr.release()
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

// commandStore holds background commands. Finished ones are kept for late
// readers within bounds, checked on every access: RetainFinished after their
// end, at most maxFinished of them, holding at most maxBytes of output
// together; past a bound the oldest-ended go first. The ids of those let go
// are remembered (up to maxExpiredIDs) so that a late reader is told the
// result expired, not that there never was one.
type commandStore struct {
	clock       ports.Clock
	maxFinished int
	maxBytes    int64

	mu      sync.Mutex
	m       map[string]*entry
	expired map[string]struct{}
	order   []string // expired ids, oldest first (a ring of maxExpiredIDs)
	next    int
}

func newCommandStore(c ports.Clock, maxFinished int, maxBytes int64) *commandStore {
	return &commandStore{clock: c, maxFinished: maxFinished, maxBytes: maxBytes, m: map[string]*entry{}, expired: map[string]struct{}{}}
}

func (s *commandStore) add(id string, e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked()
	s.m[id] = e
}

// get finds a command; expired says it was let go by a bound.
func (s *commandStore) get(id string) (e *entry, ok, expired bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked()
	if e, ok := s.m[id]; ok {
		return e, true, false
	}
	_, expired = s.expired[id]
	return nil, false, expired
}

// held returns the finished commands' count and output bytes, as every
// access sees them (after a sweep).
func (s *commandStore) held() (count int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked()
	for _, e := range s.m {
		e.mu.Lock()
		if e.ended {
			count++
			bytes += e.stdout.size() + e.stderr.size()
		}
		e.mu.Unlock()
	}
	return count, bytes
}

func (s *commandStore) sweepLocked() {
	now := s.clock.Now()
	type done struct {
		id   string
		e    *entry
		at   time.Time
		size int64
	}
	var finished []done
	var total int64
	for id, e := range s.m {
		e.mu.Lock()
		ended, at, size := e.ended, e.endedAt, e.stdout.size()+e.stderr.size()
		e.mu.Unlock()
		if !ended {
			continue
		}
		if now.Sub(at) >= RetainFinished {
			s.expireLocked(id, e)
			continue
		}
		finished = append(finished, done{id, e, at, size})
		total += size
	}
	if len(finished) <= s.maxFinished && total <= s.maxBytes {
		return
	}
	sort.Slice(finished, func(i, j int) bool { return finished[i].at.Before(finished[j].at) })
	for n := len(finished); n > 0 && (n > s.maxFinished || total > s.maxBytes); n-- {
		f := finished[len(finished)-n]
		s.expireLocked(f.id, f.e)
		total -= f.size
	}
}

// expireLocked lets a finished command go: out of the map, its output
// released at once (the link may hold the entry a while longer through its
// output callback), its id remembered as expired.
func (s *commandStore) expireLocked(id string, e *entry) {
	delete(s.m, id)
	e.release()
	if len(s.order) < maxExpiredIDs {
		s.order = append(s.order, id)
	} else {
		delete(s.expired, s.order[s.next])
		s.order[s.next] = id
		s.next = (s.next + 1) % maxExpiredIDs
	}
	s.expired[id] = struct{}{}
}
