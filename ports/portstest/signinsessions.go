package portstest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// RunSignInSessionsSuite is the conformance suite of ports.SignInSessions;
// open returns a store kept in dir (the same dir again is the store
// reopened, as after a restart). A store drops expired sessions on a write
// by its own clock (the wall clock): the suite's expired sessions ended an
// hour before now. The bound (ports.MaxSignInSessions, the oldest dropped)
// is each store's own test: ten thousand writes of a file are too slow for
// a suite.
func RunSignInSessionsSuite(t *testing.T, open func(t *testing.T, dir string) ports.SignInSessions) {
	session := func(id, token string, created time.Time, ttl time.Duration) ports.SignInSession {
		return ports.SignInSession{IDHash: id, TokenID: token, Binding: "b-" + id, Created: created, Expires: created.Add(ttl)}
	}
	t.Run("SessionsOutliveAReopen", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		now := time.Now()
		a, b := session("aa", "operator", now, 12*time.Hour), session("bb", "tok-1", now.Add(time.Second), time.Hour)
		createSession(t, s, a)
		createSession(t, s, b)
		again := open(t, dir)
		wantSession(t, again, a, now)
		wantSession(t, again, b, now)
		wantNoSession(t, again, "cc", now)
	})
	t.Run("ASessionEndsAtItsExpiry", func(t *testing.T) {
		s := open(t, t.TempDir())
		now := time.Now()
		a := session("aa", "operator", now, time.Hour)
		createSession(t, s, a)
		wantSession(t, s, a, a.Expires.Add(-time.Nanosecond))
		wantNoSession(t, s, "aa", a.Expires)
		wantNoSession(t, s, "aa", a.Expires.Add(time.Hour))
	})
	t.Run("DeleteEndsOneAndDeletingNoneIsFine", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		now := time.Now()
		a, b := session("aa", "operator", now, time.Hour), session("bb", "operator", now, time.Hour)
		createSession(t, s, a)
		createSession(t, s, b)
		if err := s.Delete("aa"); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete("aa"); err != nil {
			t.Fatalf("deleting a session already deleted: %v", err)
		}
		wantNoSession(t, s, "aa", now)
		wantSession(t, s, b, now)
		again := open(t, dir)
		wantNoSession(t, again, "aa", now)
		wantSession(t, again, b, now)
	})
	t.Run("DeleteForTokenEndsOnlyItsSessions", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		now := time.Now()
		keep := session("k1", "tok-2", now, time.Hour)
		for _, ss := range []ports.SignInSession{session("a1", "tok-1", now, time.Hour), session("a2", "tok-1", now, time.Hour), keep} {
			createSession(t, s, ss)
		}
		if err := s.DeleteForToken("tok-1"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteForToken("never"); err != nil {
			t.Fatalf("a token without sessions: %v", err)
		}
		again := open(t, dir)
		wantNoSession(t, again, "a1", now)
		wantNoSession(t, again, "a2", now)
		wantSession(t, again, keep, now)
	})
	t.Run("DeleteAllEndsEverySession", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		now := time.Now()
		createSession(t, s, session("a1", "tok-1", now, time.Hour))
		createSession(t, s, session("a2", "operator", now, time.Hour))
		if err := s.DeleteAll(); err != nil {
			t.Fatal(err)
		}
		again := open(t, dir)
		wantNoSession(t, again, "a1", now)
		wantNoSession(t, again, "a2", now)
		createSession(t, again, session("a3", "operator", now, time.Hour))
		wantSession(t, open(t, dir), session("a3", "operator", now, time.Hour), now)
	})
	t.Run("ExpiredSessionsAreNotKept", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		now := time.Now()
		createSession(t, s, session("old", "operator", now.Add(-2*time.Hour), time.Hour))
		createSession(t, s, session("new", "operator", now, time.Hour))
		// Seen from before it ended, the expired one is gone all the same.
		wantNoSession(t, open(t, dir), "old", now.Add(-90*time.Minute))
	})
	t.Run("ConcurrentSignInsAreAllKept", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		now := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.Create(session(fmt.Sprintf("c%02d", i), "operator", now, time.Hour)); err != nil {
					errs <- err
				}
				s.Lookup(fmt.Sprintf("c%02d", i), now)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		again := open(t, dir)
		for i := range 40 {
			wantSession(t, again, session(fmt.Sprintf("c%02d", i), "operator", now, time.Hour), now)
		}
	})
}

func createSession(t *testing.T, s ports.SignInSessions, ss ports.SignInSession) {
	t.Helper()
	if err := s.Create(ss); err != nil {
		t.Fatalf("Create(%s): %v", ss.IDHash, err)
	}
}

func wantSession(t *testing.T, s ports.SignInSessions, want ports.SignInSession, now time.Time) {
	t.Helper()
	got, ok := s.Lookup(want.IDHash, now)
	if !ok || got.IDHash != want.IDHash || got.TokenID != want.TokenID || got.Binding != want.Binding ||
		!got.Created.Equal(want.Created) || !got.Expires.Equal(want.Expires) {
		t.Fatalf("Lookup(%s) = %+v, %v; want %+v", want.IDHash, got, ok, want)
	}
}

func wantNoSession(t *testing.T, s ports.SignInSessions, idHash string, now time.Time) {
	t.Helper()
	if got, ok := s.Lookup(idHash, now); ok {
		t.Fatalf("Lookup(%s) = %+v; want none", idHash, got)
	}
}
