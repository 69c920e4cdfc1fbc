package ports

import (
	"context"
	"errors"
	"time"
)

// SessionLog errors.
var (
	// ErrSessionLogClosed is returned by every call after Close, and by a
	// Wait that Close interrupts.
	ErrSessionLogClosed = errors.New("session log closed")
	// ErrOffsetBeyondEnd is returned by ReadFrom for an offset past End: the
	// reader claims bytes that were never assigned (or did not survive a
	// machine crash), so it must resync from End.
	ErrOffsetBeyondEnd = errors.New("offset beyond the end of the session log")
	// ErrOutputNotStored is returned by an Append whose bytes (some or all)
	// could not be stored, e.g. on a full disk. They took their offsets all
	// the same: a hole that readers see as a gap, counted by Lost.
	ErrOutputNotStored = errors.New("session output not stored")
)

// SessionLog is the output of every session: an append-only byte log per
// session, addressed by absolute offsets that are assigned once and never
// reused, bounded in size per session by dropping the oldest bytes. A
// session's log springs into existence (empty, at offset 0) on first use.
//
// Concurrency: one writer per session (Append in order) and any number of
// readers and waiters at the same time; different sessions are independent.
type SessionLog interface {
	// Append adds data to the end of the session's log and returns the
	// offset of its first byte (End before the call; for empty data, End).
	// When the log is over its bound afterwards, the oldest bytes are
	// dropped. Bytes that cannot be stored (a full disk) still take their
	// offsets, End moves past all of data, and the error wraps
	// ErrOutputNotStored: they are a hole, which readers see as a gap and
	// Lost counts, never dropped in silence. Every Append tries to store
	// again, so storing resumes by itself. On any other error a prefix of
	// data may have been appended (End says how much).
	Append(sessionID string, data []byte) (offset uint64, err error)
	// ReadFrom returns up to max bytes starting at offset, and start, the
	// offset of data[0]. When offset is older than the first byte held,
	// the bytes in between were dropped: data begins at the first held
	// byte, start > offset and gap is true (the viewer shows a gap notice).
	// Likewise when offset lies in a hole (bytes not stored): data begins
	// after it. A read ends at the next hole, so a gap is always at the
	// start of an answer.
	// At End it returns no data, start == offset. max <= 0 returns no data
	// but still start and gap. Bytes are returned exactly as appended: a
	// reader following start+len(data) sees every held byte once.
	ReadFrom(sessionID string, offset uint64, max int) (data []byte, start uint64, gap bool, err error)
	// Bounds returns the offset of the first byte held and End.
	Bounds(sessionID string) (first, end uint64)
	// End is the offset the next appended byte will get.
	End(sessionID string) uint64
	// Lost is how many bytes of the session's output could not be stored
	// (the holes of Append), since the log was opened; holes between bytes
	// kept on disk are found again after a restart.
	Lost(sessionID string) uint64
	// Wait returns nil as soon as End(sessionID) > offset, ctx.Err() when
	// ctx ends first, ErrSessionNotFound when the log is deleted while
	// waiting and ErrSessionLogClosed when the log closes. It never polls.
	Wait(ctx context.Context, sessionID string, offset uint64) error
	// Release closes what the log holds open for the session (its files);
	// they reopen on the next use. Called when a session ends, so that
	// ended sessions hold no descriptors.
	Release(sessionID string) error
	// Delete removes the session's log. Session ids are never reused, so a
	// later Append under the same id starts a new log at 0.
	Delete(sessionID string) error
	// Close makes what was appended durable and releases the log.
	Close() error
}

// OutputSource says where appended bytes come from: a command's output
// stream, at Offset of that stream.
type OutputSource struct {
	CommandID string
	Stream    OutputStream
	Offset    uint64
}

// OutputCursor is how far a session's log holds the output of the command
// that writes it: Next is, per stream, the offset of the first byte not in
// the log, and End the log's End when it was recorded.
type OutputCursor struct {
	CommandID string
	Next      map[OutputStream]uint64
	End       uint64
}

// SessionOutputLog is a SessionLog that keeps, with the same durability as
// the bytes, which output of the writing command it holds, so a restarted
// server neither stores again what the agent sends again (it keeps output
// until acknowledged) nor skips a gap in silence.
type SessionOutputLog interface {
	SessionLog
	// AppendOutput is Append of data, src's output; lost bytes of the
	// stream that never arrived right before it become a hole first (a
	// gap for readers, counted by Lost). The returned offset is that of
	// data[0].
	AppendOutput(sessionID string, src OutputSource, lost uint64, data []byte) (offset uint64, err error)
	// OutputCursor is the session's cursor, false when none is kept
	// (nothing appended by AppendOutput, or a plain Append since).
	OutputCursor(sessionID string) (OutputCursor, bool)
}

// ReportedSession is one session an agent says it runs, from the report it
// sends on every (re)connect.
type ReportedSession struct {
	SessionID string // empty when the agent does not know it
	// AgentName is the agent-side name (tmux session name).
	AgentName string
	Type      SessionType
	// CommandID streams the session now: a session adopted by a restarted
	// agent gets a new one, since its output offsets start again.
	CommandID string
	StartedAt time.Time
}

// SessionReconciler takes the sessions an agent reports on each
// (re)connect. The agent link calls it before it settles the commands of
// earlier connections, so a session can move to its new command first.
type SessionReconciler interface {
	ReconcileSessions(agentID string, reported []ReportedSession)
}
