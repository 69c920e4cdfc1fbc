package keylock

import (
	"sync"
	"testing"
)

func TestSameKeyIsSerialisedOtherKeysAreNot(t *testing.T) {
	var m Map
	unlockA := m.Lock("a")
	// Another key is free while "a" is held.
	m.Lock("b")()

	got := make(chan struct{})
	go func() {
		m.Lock("a")()
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("a second Lock of a held key did not wait")
	default:
	}
	unlockA()
	<-got

	// Counting under the lock from many goroutines loses nothing.
	n := 0
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			defer m.Lock("c")()
			n++
		})
	}
	wg.Wait()
	if n != 50 {
		t.Fatalf("n = %d", n)
	}
}
