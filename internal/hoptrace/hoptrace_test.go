package hoptrace

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Off, a mark records nothing; started, marks reach the writer in order,
// each "<unix ns> <hop>".
func TestMarksAreWrittenOnlyOnceStarted(t *testing.T) {
	if On() {
		t.Fatal("on before Start")
	}
	Mark("before")
	var w lockedBuf
	Start(&w)
	t.Cleanup(stopForTest)
	if !On() {
		t.Fatal("off after Start")
	}
	Mark("one")
	Mark("two")
	testkit.Eventually(t, 15*time.Second, "both marks written", func() bool { return strings.Count(w.String(), "\n") >= 2 })
	lines := strings.Split(strings.TrimSpace(w.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("written %q, want the two marks after Start", w.String())
	}
	var last int64
	for i, want := range []string{"one", "two"} {
		ns, hop, ok := strings.Cut(lines[i], " ")
		at, err := strconv.ParseInt(ns, 10, 64)
		if !ok || err != nil || hop != want || at < last {
			t.Fatalf("line %d %q, want a time not before %d and %q", i, lines[i], last, want)
		}
		last = at
	}
}
