package portstest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// RunPublicPortsSuite is the conformance suite of ports.PublicPorts; open
// returns a store kept in dir (the same dir again is the store reopened, as
// after a restart). Marks are written with a store's own idea of the time
// of the write (the wall clock): the suite's "now" is the wall clock too,
// and an expired mark is one whose end is an hour past.
func RunPublicPortsSuite(t *testing.T, open func(t *testing.T, dir string) ports.PublicPorts) {
	t.Run("MarksOutliveAReopen", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		now := time.Now()
		setPublic(t, s, "dev", 8080, now.Add(2*time.Hour))
		setPublic(t, s, "dev", 5173, now.Add(time.Hour))
		setPublic(t, s, "other.env", 5173, now.Add(3*time.Hour))
		again := open(t, dir)
		wantPortPublic(t, again, "dev", 5173, now.Add(time.Hour), now)
		wantPortPublic(t, again, "dev", 8080, now.Add(2*time.Hour), now)
		wantPortPublic(t, again, "other.env", 5173, now.Add(3*time.Hour), now)
		wantPortPrivate(t, again, "dev", 3000, now)
		wantPublicList(t, again, "dev", now, []ports.PublicPort{
			{Environment: "dev", Port: 5173, Until: now.Add(time.Hour)},
			{Environment: "dev", Port: 8080, Until: now.Add(2 * time.Hour)},
		})
	})
	t.Run("SetReplacesAnEarlierMark", func(t *testing.T) {
		s := open(t, t.TempDir())
		now := time.Now()
		setPublic(t, s, "dev", 5173, now.Add(time.Hour))
		setPublic(t, s, "dev", 5173, now.Add(30*time.Minute)) // shorter: replaced, not kept the longer
		wantPortPublic(t, s, "dev", 5173, now.Add(30*time.Minute), now)
		wantPublicList(t, s, "dev", now, []ports.PublicPort{{Environment: "dev", Port: 5173, Until: now.Add(30 * time.Minute)}})
	})
	t.Run("SetPrivateRemovesAndRemovingNoneIsFine", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		now := time.Now()
		setPublic(t, s, "dev", 5173, now.Add(time.Hour))
		setPublic(t, s, "dev", 8080, now.Add(time.Hour))
		if err := s.SetPrivate("dev", 5173); err != nil {
			t.Fatal(err)
		}
		if err := s.SetPrivate("dev", 5173); err != nil {
			t.Fatalf("removing a mark already removed: %v", err)
		}
		if err := s.SetPrivate("never", 1); err != nil {
			t.Fatalf("removing a mark of an unknown environment: %v", err)
		}
		wantPortPrivate(t, s, "dev", 5173, now)
		wantPortPublic(t, s, "dev", 8080, now.Add(time.Hour), now)
		wantPortPrivate(t, open(t, dir), "dev", 5173, now)
	})
	t.Run("AMarkEndsAtItsUntil", func(t *testing.T) {
		s := open(t, t.TempDir())
		now := time.Now()
		until := now.Add(time.Hour)
		setPublic(t, s, "dev", 5173, until)
		wantPortPublic(t, s, "dev", 5173, until, until.Add(-time.Nanosecond))
		wantPortPrivate(t, s, "dev", 5173, until)
		wantPortPrivate(t, s, "dev", 5173, until.Add(time.Minute))
		wantPublicList(t, s, "dev", until, nil)
		wantPublicList(t, s, "dev", until.Add(-time.Second), []ports.PublicPort{{Environment: "dev", Port: 5173, Until: until}})
	})
	t.Run("ExpiredMarksAreNotKept", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		now := time.Now()
		past := now.Add(-time.Hour)
		for p := range ports.MaxPublicPortsPerEnvironment {
			setPublic(t, s, "dev", uint16(1000+p), past)
		}
		// Expired marks count for nothing: the environment has room.
		setPublic(t, s, "dev", 5173, now.Add(time.Hour))
		again := open(t, dir)
		wantPublicList(t, again, "dev", now, []ports.PublicPort{{Environment: "dev", Port: 5173, Until: now.Add(time.Hour)}})
		// Seen from before they ended, they are gone all the same.
		wantPortPrivate(t, again, "dev", 1000, past.Add(-time.Hour))
	})
	t.Run("BoundedPerEnvironment", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		now := time.Now()
		for p := range ports.MaxPublicPortsPerEnvironment {
			setPublic(t, s, "dev", uint16(2000+p), now.Add(time.Hour))
		}
		err := s.SetPublic("dev", 5173, now.Add(time.Hour))
		if !errors.Is(err, ports.ErrTooManyPublicPorts) {
			t.Fatalf("mark %d of one environment: %v, want ErrTooManyPublicPorts", ports.MaxPublicPortsPerEnvironment+1, err)
		}
		wantPortPrivate(t, s, "dev", 5173, now)
		// Renewing a mark it holds is no new mark; other environments have
		// their own room.
		setPublic(t, s, "dev", 2000, now.Add(2*time.Hour))
		wantPortPublic(t, s, "dev", 2000, now.Add(2*time.Hour), now)
		setPublic(t, s, "dev2", 5173, now.Add(time.Hour))
		// Making one private makes room.
		if err := s.SetPrivate("dev", 2001); err != nil {
			t.Fatal(err)
		}
		setPublic(t, s, "dev", 5173, now.Add(time.Hour))
		if got := len(open(t, dir).Public("dev", now)); got != ports.MaxPublicPortsPerEnvironment {
			t.Fatalf("after reopen, %d marks, want %d", got, ports.MaxPublicPortsPerEnvironment)
		}
	})
	t.Run("ForgetEnvironmentRemovesOnlyItsMarks", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		now := time.Now()
		for _, env := range []string{"dev", "Dev", "dev.1", "de"} {
			setPublic(t, s, env, 5173, now.Add(time.Hour))
		}
		setPublic(t, s, "dev", 8080, now.Add(time.Hour))
		if err := s.ForgetEnvironment("dev"); err != nil {
			t.Fatal(err)
		}
		if err := s.ForgetEnvironment("never"); err != nil {
			t.Fatalf("forgetting an environment without marks: %v", err)
		}
		again := open(t, dir)
		wantPublicList(t, again, "dev", now, nil)
		wantPortPrivate(t, again, "dev", 8080, now)
		for _, env := range []string{"Dev", "dev.1", "de"} {
			wantPortPublic(t, again, env, 5173, now.Add(time.Hour), now)
		}
	})
	t.Run("ConcurrentMarksAreAllKept", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		now := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				env := fmt.Sprintf("env-%d", i%4)
				if err := s.SetPublic(env, uint16(3000+i), now.Add(time.Hour)); err != nil {
					errs <- err
				}
				s.PublicUntil(env, uint16(3000+i), now)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		again := open(t, dir)
		for i := range 40 {
			wantPortPublic(t, again, fmt.Sprintf("env-%d", i%4), uint16(3000+i), now.Add(time.Hour), now)
		}
	})
}

func setPublic(t *testing.T, s ports.PublicPorts, env string, port uint16, until time.Time) {
	t.Helper()
	if err := s.SetPublic(env, port, until); err != nil {
		t.Fatalf("SetPublic(%q, %d): %v", env, port, err)
	}
}

func wantPortPublic(t *testing.T, s ports.PublicPorts, env string, port uint16, until, now time.Time) {
	t.Helper()
	got, ok := s.PublicUntil(env, port, now)
	if !ok || !got.Equal(until) {
		t.Fatalf("PublicUntil(%q, %d) = %v, %v; want %v, true", env, port, got, ok, until)
	}
}

func wantPortPrivate(t *testing.T, s ports.PublicPorts, env string, port uint16, now time.Time) {
	t.Helper()
	if got, ok := s.PublicUntil(env, port, now); ok {
		t.Fatalf("PublicUntil(%q, %d) = %v, true; want not public", env, port, got)
	}
}

func wantPublicList(t *testing.T, s ports.PublicPorts, env string, now time.Time, want []ports.PublicPort) {
	t.Helper()
	got := s.Public(env, now)
	same := len(got) == len(want)
	for i := 0; same && i < len(got); i++ {
		same = got[i].Environment == want[i].Environment && got[i].Port == want[i].Port && got[i].Until.Equal(want[i].Until)
	}
	if !same {
		t.Fatalf("Public(%q) = %+v, want %+v (by port)", env, got, want)
	}
}
