package portsfake

import (
	"context"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// SessionLog is a fake ports.SessionLog in memory, bounded to a number of
// bytes per session (0: unbounded) by dropping the oldest. What it keeps
// stands for the disk: Reopen gives a new log over it.
type SessionLog struct {
	kept *sessionLogs

	mu     sync.Mutex // guards closed; taken before kept.mu
	closed bool
	// gone is closed by Close, waking the waiters of this log.
	gone chan struct{}
}

// sessionLogs is what survives a Reopen.
type sessionLogs struct {
	mu   sync.Mutex
	max  int
	logs map[string]*sessionBytes
}

type sessionBytes struct {
	first uint64
	data  []byte
	// grew is closed and replaced on every append, and closed by Delete.
	grew    chan struct{}
	deleted bool
}

var _ ports.SessionLog = (*SessionLog)(nil)

// NewSessionLog returns a log holding at most max bytes per session.
func NewSessionLog(max int) *SessionLog {
	return &SessionLog{kept: &sessionLogs{max: max, logs: map[string]*sessionBytes{}}, gone: make(chan struct{})}
}

// Reopen returns a new log over what this one kept.
func (l *SessionLog) Reopen() *SessionLog {
	return &SessionLog{kept: l.kept, gone: make(chan struct{})}
}

// lock locks what the log keeps, or says the log is closed.
func (l *SessionLog) lock() (*sessionLogs, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ports.ErrSessionLogClosed
	}
	l.kept.mu.Lock()
	return l.kept, nil
}

func (k *sessionLogs) get(id string) *sessionBytes {
	m := k.logs[id]
	if m == nil {
		m = &sessionBytes{grew: make(chan struct{})}
		k.logs[id] = m
	}
	return m
}

// Append implements ports.SessionLog.
func (l *SessionLog) Append(id string, data []byte) (uint64, error) {
	k, err := l.lock()
	if err != nil {
		return 0, err
	}
	defer k.mu.Unlock()
	m := k.get(id)
	off := m.first + uint64(len(m.data))
	m.data = append(m.data, data...)
	if k.max > 0 && len(m.data) > k.max {
		drop := len(m.data) - k.max
		m.first += uint64(drop) //nolint:gosec // drop is a slice length
		m.data = append([]byte(nil), m.data[drop:]...)
	}
	if len(data) > 0 {
		close(m.grew)
		m.grew = make(chan struct{})
	}
	return off, nil
}

// ReadFrom implements ports.SessionLog.
func (l *SessionLog) ReadFrom(id string, offset uint64, max int) ([]byte, uint64, bool, error) {
	k, err := l.lock()
	if err != nil {
		return nil, 0, false, err
	}
	defer k.mu.Unlock()
	m := k.get(id)
	if end := m.first + uint64(len(m.data)); offset > end {
		return nil, 0, false, ports.ErrOffsetBeyondEnd
	}
	gap := false
	if offset < m.first {
		offset, gap = m.first, true
	}
	if max <= 0 {
		return nil, offset, gap, nil
	}
	b := m.data[offset-m.first:]
	if len(b) > max {
		b = b[:max]
	}
	return append([]byte(nil), b...), offset, gap, nil
}

// Bounds implements ports.SessionLog.
func (l *SessionLog) Bounds(id string) (uint64, uint64) {
	l.kept.mu.Lock()
	defer l.kept.mu.Unlock()
	m := l.kept.logs[id]
	if m == nil {
		return 0, 0
	}
	return m.first, m.first + uint64(len(m.data))
}

// Lost implements ports.SessionLog: the fake stores everything.
func (l *SessionLog) Lost(string) uint64 { return 0 }

// End implements ports.SessionLog.
func (l *SessionLog) End(id string) uint64 {
	_, end := l.Bounds(id)
	return end
}

// Wait implements ports.SessionLog.
func (l *SessionLog) Wait(ctx context.Context, id string, offset uint64) error {
	for {
		k, err := l.lock()
		if err != nil {
			return err
		}
		m := k.get(id)
		if m.first+uint64(len(m.data)) > offset {
			k.mu.Unlock()
			return nil
		}
		grew := m.grew
		k.mu.Unlock()
		select {
		case <-grew:
			k.mu.Lock()
			deleted := m.deleted
			k.mu.Unlock()
			if deleted {
				return ports.ErrSessionNotFound
			}
		case <-l.gone:
			return ports.ErrSessionLogClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Release implements ports.SessionLog: nothing is held open here.
func (l *SessionLog) Release(string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ports.ErrSessionLogClosed
	}
	return nil
}

// Delete implements ports.SessionLog; its waiters get ErrSessionNotFound.
func (l *SessionLog) Delete(id string) error {
	k, err := l.lock()
	if err != nil {
		return err
	}
	defer k.mu.Unlock()
	if m := k.logs[id]; m != nil {
		m.deleted = true
		close(m.grew)
		delete(k.logs, id)
	}
	return nil
}

// Close implements ports.SessionLog; its waiters get ErrSessionLogClosed.
func (l *SessionLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.gone)
	}
	return nil
}
