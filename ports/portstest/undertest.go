package portstest

import (
	"io"
	"testing"
)

// underTest is the store (or outbox) under test, kept in a dir of its own:
// opened, reopened there as a restart would, and closed when the test ends.
type underTest[S io.Closer] struct {
	t    *testing.T
	dir  string
	open func(t *testing.T, dir string) S
	cur  S // the store open now
}

func newUnderTest[S io.Closer](t *testing.T, open func(t *testing.T, dir string) S) *underTest[S] {
	h := &underTest[S]{t: t, dir: t.TempDir(), open: open}
	h.cur = open(t, h.dir)
	t.Cleanup(func() {
		if any(h.cur) != nil {
			h.cur.Close()
		}
	})
	return h
}

// reopen closes the store and opens it again on the same dir, as a restart.
func (h *underTest[S]) reopen() S {
	h.t.Helper()
	if err := h.cur.Close(); err != nil {
		h.t.Fatalf("Close: %v", err)
	}
	var closed S
	h.cur = closed // not closed again at the end if the open fails
	h.cur = h.open(h.t, h.dir)
	return h.cur
}
