package portstest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// RunAuditLogSuite is the conformance suite of ports.AuditLog; open returns
// a log kept in dir (the same dir again is the log reopened, as after a
// restart, once the earlier one is no longer used).
func RunAuditLogSuite(t *testing.T, open func(t *testing.T, dir string) ports.AuditLog) {
	base := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	entry := func(i int, actor, target string) ports.AuditEntry {
		return ports.AuditEntry{
			At: base.Add(time.Duration(i) * time.Second), Actor: actor, Role: "operator", Client: "192.0.2.7",
			Operation: "createEnvironment", Target: target, Status: 201, RequestID: fmt.Sprintf("req-%d", i),
		}
	}
	appendAll := func(t *testing.T, l ports.AuditLog, es ...ports.AuditEntry) {
		t.Helper()
		for _, e := range es {
			if err := l.Append(e); err != nil {
				t.Fatalf("Append(%s): %v", e.RequestID, err)
			}
		}
	}
	t.Run("EmptyLogHasNothing", func(t *testing.T) {
		l := open(t, t.TempDir())
		got, next, err := l.Query(ports.AuditQuery{})
		if err != nil || len(got) != 0 || next != "" {
			t.Fatalf("Query of an empty log = %v, %q, %v; want nothing", got, next, err)
		}
	})
	t.Run("EntriesComeBackInOrderAndOutliveAReopen", func(t *testing.T) {
		dir := t.TempDir()
		l := open(t, dir)
		want := []ports.AuditEntry{entry(1, "alice", "dev"), entry(2, "bob", "prod"), entry(3, "alice", "prod")}
		want[1].Status, want[1].Code = 404, "environment_not_found"
		appendAll(t, l, want...)
		wantEntries(t, l, ports.AuditQuery{}, want, "")
		again := open(t, dir)
		wantEntries(t, again, ports.AuditQuery{}, want, "")
		more := entry(4, "carol", "dev")
		appendAll(t, again, more)
		wantEntries(t, again, ports.AuditQuery{}, append(want, more), "")
	})
	t.Run("Filters", func(t *testing.T) {
		l := open(t, t.TempDir())
		es := []ports.AuditEntry{entry(1, "alice", "dev"), entry(2, "bob", "prod"), entry(3, "alice", "prod"), entry(4, "bob", "dev")}
		appendAll(t, l, es...)
		wantEntries(t, l, ports.AuditQuery{Actor: "alice"}, []ports.AuditEntry{es[0], es[2]}, "")
		wantEntries(t, l, ports.AuditQuery{Target: "dev"}, []ports.AuditEntry{es[0], es[3]}, "")
		wantEntries(t, l, ports.AuditQuery{Actor: "bob", Target: "prod"}, []ports.AuditEntry{es[1]}, "")
		wantEntries(t, l, ports.AuditQuery{Since: es[2].At}, es[2:], "")
		wantEntries(t, l, ports.AuditQuery{Actor: "nobody"}, nil, "")
	})
	t.Run("PagesReachEveryEntryOnce", func(t *testing.T) {
		l := open(t, t.TempDir())
		var es []ports.AuditEntry
		for i := range 7 {
			es = append(es, entry(i, "alice", "dev"))
		}
		appendAll(t, l, es...)
		wantEntries(t, l, ports.AuditQuery{}, es, "")
		got := pageAll(t, l, ports.AuditQuery{Limit: 2})
		sameEntries(t, "paging by 2", got, es)
		got = pageAll(t, l, ports.AuditQuery{Limit: 7})
		sameEntries(t, "one full page", got, es)
	})
	t.Run("LimitDefaultsAndIsCapped", func(t *testing.T) {
		l := open(t, t.TempDir())
		var es []ports.AuditEntry
		for i := range ports.MaxAuditLimit + 5 {
			es = append(es, entry(i, "alice", "dev"))
		}
		appendAll(t, l, es...)
		got, next, err := l.Query(ports.AuditQuery{})
		if err != nil || len(got) != ports.DefaultAuditLimit || next == "" {
			t.Fatalf("no limit: %d entries, next %q, %v; want %d and a next cursor", len(got), next, err, ports.DefaultAuditLimit)
		}
		got, next, err = l.Query(ports.AuditQuery{Limit: ports.MaxAuditLimit * 10})
		if err != nil || len(got) != ports.MaxAuditLimit || next == "" {
			t.Fatalf("limit past the cap: %d entries, next %q, %v; want %d and a next cursor", len(got), next, err, ports.MaxAuditLimit)
		}
		rest, next, err := l.Query(ports.AuditQuery{Cursor: next, Limit: ports.MaxAuditLimit})
		if err != nil || next != "" {
			t.Fatalf("the rest: next %q, %v", next, err)
		}
		sameEntries(t, "the rest", rest, es[ports.MaxAuditLimit:])
	})
	t.Run("AForeignCursorIsRefused", func(t *testing.T) {
		l := open(t, t.TempDir())
		appendAll(t, l, entry(1, "alice", "dev"))
		for _, c := range []string{"not a cursor!", "%%%"} {
			if _, _, err := l.Query(ports.AuditQuery{Cursor: c}); !errors.Is(err, ports.ErrBadCursor) {
				t.Errorf("Query(cursor %q) = %v; want ErrBadCursor", c, err)
			}
		}
	})
}

func pageAll(t *testing.T, l ports.AuditLog, q ports.AuditQuery) []ports.AuditEntry {
	t.Helper()
	var all []ports.AuditEntry
	for range 10_000 {
		got, next, err := l.Query(q)
		if err != nil {
			t.Fatalf("Query(%+v): %v", q, err)
		}
		if len(got) > q.Limit {
			t.Fatalf("Query(limit %d) gave %d entries", q.Limit, len(got))
		}
		all = append(all, got...)
		if next == "" {
			return all
		}
		q.Cursor = next
	}
	t.Fatal("paging did not end")
	return nil
}

func wantEntries(t *testing.T, l ports.AuditLog, q ports.AuditQuery, want []ports.AuditEntry, wantNext string) {
	t.Helper()
	got, next, err := l.Query(q)
	if err != nil {
		t.Fatalf("Query(%+v): %v", q, err)
	}
	sameEntries(t, fmt.Sprintf("Query(%+v)", q), got, want)
	if next != wantNext {
		t.Errorf("Query(%+v) next = %q; want %q", q, next, wantNext)
	}
}

func sameEntries(t *testing.T, what string, got, want []ports.AuditEntry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries; want %d (%v)", what, len(got), len(want), got)
	}
	for i := range got {
		g, w := got[i], want[i]
		if !g.At.Equal(w.At) {
			t.Fatalf("%s: entry %d at %v; want %v", what, i, g.At, w.At)
		}
		g.At = w.At
		if g != w {
			t.Fatalf("%s: entry %d = %+v; want %+v", what, i, g, w)
		}
	}
}
