package agentd

import (
	"sync"
)

// maxStdinQueued bounds the input waiting for a command that does not read
// it; beyond it, input is dropped (and logged) rather than held in memory.
const maxStdinQueued = 8 << 20

// stdinQueue hands a command's input to its own writer goroutine, so a
// command that does not read its stdin blocks only that goroutine, never
// the agent's receive loop (which also carries kills and other commands).
type stdinQueue struct {
	mu     sync.Mutex
	chunks [][]byte
	bytes  int
	eof    bool
	wake   chan struct{}
}

func newStdinQueue() *stdinQueue { return &stdinQueue{wake: make(chan struct{}, 1)} }

// push queues data, and the end of input after it when eof; false when
// data did not fit and was dropped.
func (q *stdinQueue) push(data []byte, eof bool) bool {
	q.mu.Lock()
	fits := q.bytes+len(data) <= maxStdinQueued
	if fits && len(data) > 0 {
		q.chunks = append(q.chunks, append([]byte(nil), data...))
		q.bytes += len(data)
	}
	q.eof = q.eof || eof
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return fits
}

// take returns what is queued and whether the input ends after it.
func (q *stdinQueue) take() ([][]byte, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	chunks, eof := q.chunks, q.eof
	q.chunks, q.bytes = nil, 0
	return chunks, eof
}

// stdinLoop writes r's queued input in order until the input ends or the
// command does.
func (a *Agent) stdinLoop(r *running, q *stdinQueue) {
	for {
		select {
		case <-q.wake:
		case <-r.proc.Done():
			return
		}
		chunks, eof := q.take()
		for _, c := range chunks {
			if err := r.proc.WriteStdin(c); err != nil {
				a.log.Debug("stdin write failed", "command_id", r.id, "err", err)
				return
			}
		}
		if eof {
			_ = r.proc.CloseStdin()
			return
		}
	}
}
