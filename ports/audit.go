package ports

import (
	"errors"
	"time"
)

// AuditEntry is one state-changing call, as the audit log keeps it: who
// (actor, role, client address), what (operation, target), when, and how
// it ended (status, error code), with the request id the server's log
// line and the X-Request-Id response header carry too. It has no field for
// a secret or a request body, by design.
type AuditEntry struct {
	At        time.Time `json:"at"`
	Actor     string    `json:"actor"`
	Role      string    `json:"role"`
	Client    string    `json:"client"`
	Operation string    `json:"operation"`
	Target    string    `json:"target"`
	Status    int       `json:"status"`
	Code      string    `json:"code"`
	RequestID string    `json:"request_id"`
}

// AuditQuery selects entries: those at or after Since (zero: all), of
// Actor and of Target (empty: any), at most Limit of them (0:
// DefaultAuditLimit; capped at MaxAuditLimit), from Cursor on (empty: the
// oldest kept; else the next cursor of an earlier page).
type AuditQuery struct {
	Since  time.Time
	Actor  string
	Target string
	Limit  int
	Cursor string
}

// Limits of one AuditLog.Query page.
const (
	DefaultAuditLimit = 100
	MaxAuditLimit     = 1000
)

// ErrBadCursor: the cursor is not one the log gave out (REST: 400).
var ErrBadCursor = errors.New("not a cursor of this log")

// AuditLog keeps the audit entries, oldest first. Append is on the path of
// every state-changing call: it must be cheap. Query returns the matching
// entries oldest first and the cursor of the next page: empty when the
// page reached the end of the log (entries appended later are found with
// Since); a full page's cursor may lead to an empty page when none of the
// rest match. A store that keeps a bounded history drops the oldest
// entries; a cursor into entries dropped since goes on from the oldest
// kept.
type AuditLog interface {
	Append(AuditEntry) error
	Query(AuditQuery) (entries []AuditEntry, next string, err error)
}
