package filestore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

func TestAuditLogConformance(t *testing.T) {
	portstest.RunAuditLogSuite(t, func(t *testing.T, dir string) ports.AuditLog {
		return openAudit(t, AuditLogConfig{Dir: dir})
	})
}

func openAudit(t *testing.T, cfg AuditLogConfig) *AuditLog {
	t.Helper()
	l, err := NewAuditLog(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func auditEntry(i int) ports.AuditEntry {
	return ports.AuditEntry{
		At: time.Date(2026, 12, 5, 9, 0, i, 0, time.UTC), Actor: "operator", Role: "admin", Client: "192.0.2.1",
		Operation: "execCommand", Target: fmt.Sprintf("agent-%d", i%3), Status: 200, RequestID: fmt.Sprintf("r%04d", i),
	}
}

func appendAudit(t *testing.T, l *AuditLog, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := l.Append(auditEntry(i)); err != nil {
			t.Fatal(err)
		}
	}
}

// ids pages through the whole log by limit and returns the request ids.
func auditIDs(t *testing.T, l ports.AuditLog, q ports.AuditQuery) []string {
	t.Helper()
	var ids []string
	for range 10_000 {
		es, next, err := l.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			ids = append(ids, e.RequestID)
		}
		if next == "" {
			return ids
		}
		q.Cursor = next
	}
	t.Fatal("paging did not end")
	return nil
}

func wantIDRange(t *testing.T, what string, got []string, from, to int) {
	t.Helper()
	if len(got) != to-from {
		t.Fatalf("%s: %d entries %v; want r%04d..r%04d", what, len(got), got, from, to-1)
	}
	for i, id := range got {
		if want := fmt.Sprintf("r%04d", from+i); id != want {
			t.Fatalf("%s: entry %d is %s; want %s", what, i, id, want)
		}
	}
}

// The log rotates like the mission archive: past MaxBytes audit.jsonl
// becomes audit.1.jsonl and the one before is dropped; a query pages
// across both generations, oldest first, and a cursor taken before a
// rotation goes on after it.
func TestAuditLogRotatesAndPagesAcrossGenerations(t *testing.T) {
	dir := t.TempDir()
	line, _ := auditEntryLine(auditEntry(0))
	// About ten entries a generation.
	l := openAudit(t, AuditLogConfig{Dir: dir, MaxBytes: int64(10 * len(line))})
	appendAudit(t, l, 0, 15)
	if _, err := os.Stat(filepath.Join(dir, "audit.1.jsonl")); err != nil {
		t.Fatalf("no rotated generation after 15 entries of 10 a file: %v", err)
	}
	wantIDRange(t, "across two generations", auditIDs(t, l, ports.AuditQuery{Limit: 4}), 0, 15)

	// A cursor into the old generation, then a rotation: the entries of
	// the generation the cursor is in are still there (it became the
	// older one), so paging goes on where it was.
	es, next, err := l.Query(ports.AuditQuery{Limit: 3})
	if err != nil || len(es) != 3 || next == "" {
		t.Fatalf("first page: %d, %q, %v", len(es), next, err)
	}
	es, next, err = l.Query(ports.AuditQuery{Limit: 10, Cursor: next})
	if err != nil || len(es) != 10 || next == "" {
		t.Fatalf("second page: %d, %q, %v", len(es), next, err)
	}
	appendAudit(t, l, 15, 22) // rotates: r0010.. become the older generation
	rest := auditIDs(t, l, ports.AuditQuery{Limit: 5, Cursor: next})
	wantIDRange(t, "after a rotation, from the cursor", rest, 13, 22)

	// A cursor into a generation since dropped starts from the oldest kept.
	appendAudit(t, l, 22, 45)
	got := auditIDs(t, l, ports.AuditQuery{Limit: 100, Cursor: next})
	all := auditIDs(t, l, ports.AuditQuery{})
	if len(got) == 0 || got[0] != all[0] || got[len(got)-1] != "r0044" || len(got) != len(all) {
		t.Fatalf("a cursor into a dropped generation gave %v; want everything kept, %v", got, all)
	}
	if len(all) >= 45 || len(all) < 10 {
		t.Fatalf("%d entries kept of 45 with ~10 a generation and two generations", len(all))
	}
}

func auditEntryLine(e ports.AuditEntry) ([]byte, error) {
	b, err := json.Marshal(e)
	return append(b, '\n'), err
}

// A reopened log finds both generations and its cursors again, and a torn
// last line (a crash mid-write) is dropped and overwritten.
func TestAuditLogReopens(t *testing.T) {
	dir := t.TempDir()
	line, _ := auditEntryLine(auditEntry(0))
	cfg := AuditLogConfig{Dir: dir, MaxBytes: int64(10 * len(line))}
	l, err := NewAuditLog(cfg)
	if err != nil {
		t.Fatal(err)
	}
	appendAudit(t, l, 0, 14)
	_, next, err := l.Query(ports.AuditQuery{Limit: 12})
	if err != nil || next == "" {
		t.Fatalf("page: %q, %v", next, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, AuditFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"at":"2026-12-05T09:00:00Z","actor":"torn`); err != nil {
		t.Fatal(err)
	}
	f.Close()

	again := openAudit(t, cfg)
	wantIDRange(t, "reopened", auditIDs(t, again, ports.AuditQuery{Limit: 5}), 0, 14)
	wantIDRange(t, "reopened, from a cursor of before", auditIDs(t, again, ports.AuditQuery{Cursor: next}), 12, 14)
	appendAudit(t, again, 14, 16)
	wantIDRange(t, "after the torn line", auditIDs(t, again, ports.AuditQuery{Cursor: next}), 12, 16)
	b, err := os.ReadFile(filepath.Join(dir, AuditFile))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("torn")) {
		t.Fatalf("the torn line is still in the file:\n%s", b)
	}
}
