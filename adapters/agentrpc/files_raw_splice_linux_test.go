package agentrpc

import (
	"bytes"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// unixPair is a connected pair of unix stream sockets.
func unixPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	return connPair(t, "unix", filepath.Join(t.TempDir(), "s"))
}

// The splice loop from an agent's connection, TCP (where the low-water
// mark holds small arrivals back) or unix: a few bytes that come alone
// after a first MiB reach the client within a tick, not at the idle
// bound (an hour here); then a large rest, all of it, and exactly n bytes
// taken from src.
func TestSpliceConnsPassesSmallArrivalsOn(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		var src, agent net.Conn
		if network == "tcp" {
			src, agent = tcpPair(t)
		} else {
			src, agent = unixPair(t)
		}
		dst, client := tcpPair(t)
		lead := bytes.Repeat([]byte("lead"), 256<<10)
		rest := bytes.Repeat([]byte("0123456789abcdef"), 200<<10)
		n := int64(len(lead) + 10 + len(rest))
		var stop atomic.Bool
		done := make(chan error, 1)
		go func() {
			w, handled, err := spliceConns(dst, src, n, time.Hour, &stop)
			if err == nil && (!handled || w != n) {
				err = io.ErrShortWrite
			}
			done <- err
		}()
		// A first MiB through, so that the loop waits for more (the
		// pause only makes that likelier) when the few bytes come.
		go func() { _, _ = agent.Write(lead) }()
		if _, err := io.ReadFull(client, make([]byte, len(lead))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		if _, err := agent.Write([]byte("0123456789")); err != nil {
			t.Fatal(err)
		}
		first := make(chan error, 1)
		go func() {
			b := make([]byte, 10)
			_, err := io.ReadFull(client, b)
			if err == nil && string(b) != "0123456789" {
				err = io.ErrUnexpectedEOF
			}
			first <- err
		}()
		if err := testkit.Receive(t, waitTimeout, first, network+": the first bytes at the client"); err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = agent.Write(append(rest, "past the end"...)) }()
		got := make([]byte, len(rest))
		if _, err := io.ReadFull(client, got); err != nil || !bytes.Equal(got, rest) {
			t.Fatalf("%s: the rest: %v", network, err)
		}
		if err := testkit.Receive(t, waitTimeout, done, network+": the splice's end"); err != nil {
			t.Fatalf("%s: %v", network, err)
		}
		tail := make([]byte, len("past the end"))
		if _, err := io.ReadFull(src, tail); err != nil || string(tail) != "past the end" {
			t.Errorf("%s: after the splice, src holds %q %v; want what came past n", network, tail, err)
		}
	}
}
