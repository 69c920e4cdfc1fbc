package portsfake

import (
	"strconv"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// AuditLog is a fake ports.AuditLog in memory; its cursor is the index of
// the next entry. Reopen gives a new log over what it keeps.
type AuditLog struct {
	kept *auditEntries
}

type auditEntries struct {
	mu      sync.Mutex
	entries []ports.AuditEntry
}

var _ ports.AuditLog = (*AuditLog)(nil)

// NewAuditLog returns an empty log.
func NewAuditLog() *AuditLog { return &AuditLog{kept: &auditEntries{}} }

// Reopen returns a new log over what this one kept.
func (l *AuditLog) Reopen() *AuditLog { return &AuditLog{kept: l.kept} }

// Entries returns a copy of every entry, oldest first.
func (l *AuditLog) Entries() []ports.AuditEntry {
	l.kept.mu.Lock()
	defer l.kept.mu.Unlock()
	return append([]ports.AuditEntry(nil), l.kept.entries...)
}

// Append keeps e.
func (l *AuditLog) Append(e ports.AuditEntry) error {
	l.kept.mu.Lock()
	defer l.kept.mu.Unlock()
	l.kept.entries = append(l.kept.entries, e)
	return nil
}

// Query pages through the entries kept.
func (l *AuditLog) Query(q ports.AuditQuery) ([]ports.AuditEntry, string, error) {
	from := 0
	if q.Cursor != "" {
		n, err := strconv.Atoi(q.Cursor)
		if err != nil || n < 0 {
			return nil, "", ports.ErrBadCursor
		}
		from = n
	}
	limit := q.Limit
	if limit <= 0 {
		limit = ports.DefaultAuditLimit
	}
	limit = min(limit, ports.MaxAuditLimit)
	l.kept.mu.Lock()
	defer l.kept.mu.Unlock()
	var out []ports.AuditEntry
	for i := from; i < len(l.kept.entries); i++ {
		e := l.kept.entries[i]
		if (!q.Since.IsZero() && e.At.Before(q.Since)) || (q.Actor != "" && e.Actor != q.Actor) || (q.Target != "" && e.Target != q.Target) {
			continue
		}
		out = append(out, e)
		if len(out) == limit {
			if i+1 == len(l.kept.entries) {
				return out, "", nil
			}
			return out, strconv.Itoa(i + 1), nil
		}
	}
	return out, "", nil
}
