package agentd

import (
	"strings"
	"testing"
)

func TestStdinQueueKeepsOrderAndBounds(t *testing.T) {
	q := newStdinQueue()
	if !q.push([]byte("a"), false) || !q.push([]byte("b"), false) {
		t.Fatal("small input refused")
	}
	if q.push(make([]byte, maxStdinQueued), false) {
		t.Fatal("input beyond the bound was queued")
	}
	if !q.push(nil, true) {
		t.Fatal("the end of input was refused")
	}
	chunks, eof := q.take()
	var got strings.Builder
	for _, c := range chunks {
		got.Write(c)
	}
	if got.String() != "ab" || !eof {
		t.Fatalf("took %q eof %v", got.String(), eof)
	}
	// Taken input frees room again.
	if !q.push(make([]byte, maxStdinQueued), false) {
		t.Fatal("room not freed by take")
	}
}
