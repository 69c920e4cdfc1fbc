package agentfs

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// socketPair is a connected pair of network (tcp or unix): the helper's
// end as a file, and the reading end.
func socketPair(t *testing.T, network string) (*os.File, net.Conn) {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "s")
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.(interface{ File() (*os.File, error) }).File()
	_ = c.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return f, s
}

// openTo starts a read of path to a socket of network; it returns the
// reader (its end is the helper's) and the socket's other end.
func openTo(t *testing.T, l *Local, network, path string) (ports.FileReader, net.Conn, error) {
	t.Helper()
	f, peer := socketPair(t, network)
	r, err := l.OpenTo(context.Background(), path, f)
	_ = f.Close()
	return r, peer, err
}

// A read sent to a socket by the helper itself (TCP or unix): the file's
// bytes exactly, then the socket's end, and a clean end of the reader;
// the refusals are Open's, before any byte.
func TestReadToASocket(t *testing.T) {
	l, dir := newLocal(t)
	for _, network := range []string{"tcp", "unix"} {
		for _, size := range []int{0, 1, 1<<20 + 3} {
			data := make([]byte, size)
			_, _ = rand.Read(data)
			if err := os.WriteFile(filepath.Join(dir, "f"), data, 0o600); err != nil {
				t.Fatal(err)
			}
			r, peer, err := openTo(t, l, network, "f")
			if err != nil {
				t.Fatalf("%s, %d bytes: %v", network, size, err)
			}
			if r.Size() != int64(size) {
				t.Errorf("%s: size %d, want %d", network, r.Size(), size)
			}
			got, err := io.ReadAll(peer)
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s: %d bytes on the socket, want %d (%v)", network, len(got), size, err)
			}
			if n, err := io.Copy(io.Discard, r); n != 0 || err != nil {
				t.Errorf("%s, %d bytes: the reader's end: %d bytes, %v; want none and a clean end", network, size, n, err)
			}
			_ = r.Close()
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]error{"missing": ports.ErrFileNotFound, "d": ports.ErrInvalidPath} {
		if _, _, err := openTo(t, l, "tcp", path); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", path, err, want)
		}
	}
}

// A file that changes while the helper sends it (grows, or is rewritten
// in place at the same size) ends the read with an error, never a clean
// end: what went out is not the file.
func TestAReadToASocketOfAFileThatChangesFails(t *testing.T) {
	l, dir := newLocal(t)
	path := filepath.Join(dir, "f")
	for name, change := range map[string]func(*os.File) error{
		"grown": func(f *os.File) error {
			_, err := f.WriteAt([]byte("more"), 8<<20)
			return err
		},
		"rewritten in place": func(f *os.File) error {
			_, err := f.WriteAt([]byte("x"), 10)
			return err
		},
	} {
		if err := os.WriteFile(path, make([]byte, 8<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		// An older modification time, so that the change shows whatever
		// the clock's granularity.
		old := time.Now().Add(-time.Hour)
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
		r, peer, err := openTo(t, l, "unix", "f")
		if err != nil {
			t.Fatal(err)
		}
		// The socket holds far less than 8 MiB: the helper is mid-way.
		if _, err := io.ReadFull(peer, make([]byte, 64<<10)); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := change(f); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		n, _ := io.Copy(io.Discard, peer)
		_, err = io.Copy(io.Discard, r)
		if err == nil || !strings.Contains(err.Error(), "changed while it was read") {
			t.Errorf("%s: %d more bytes, then %v; want the change as an error", name, n, err)
		}
		_ = r.Close()
	}
}

// An archive sent to a socket by the helper itself: the tree as tar, its
// own end included, then the socket's end and a clean end of the reader;
// what is not a directory is refused before any byte.
func TestArchiveToASocket(t *testing.T) {
	l, dir := newLocal(t)
	big := make([]byte, 3<<20+5)
	_, _ = rand.Read(big)
	want := map[string]string{"d/a": "alpha", "d/sub/big": string(big), "d/sub/empty": ""}
	for name, body := range want {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a", filepath.Join(dir, "d/link")); err != nil {
		t.Fatal(err)
	}
	for _, network := range []string{"tcp", "unix"} {
		f, peer := socketPair(t, network)
		r, err := l.OpenArchiveTo(context.Background(), "d", f)
		_ = f.Close()
		if err != nil {
			t.Fatalf("%s: %v", network, err)
		}
		if r.Size() != -1 {
			t.Errorf("%s: size %d, want -1 (not known before)", network, r.Size())
		}
		got := map[string]string{}
		links := map[string]string{}
		tr := tar.NewReader(peer)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: the tar: %v", network, err)
			}
			switch h.Typeflag {
			case tar.TypeReg:
				b, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				got["d/"+strings.TrimPrefix(h.Name, "./")] = string(b)
			case tar.TypeSymlink:
				links[strings.TrimPrefix(h.Name, "./")] = h.Linkname
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d files in the tar, want %d", network, len(got), len(want))
		}
		for name, body := range want {
			if got[name] != body {
				t.Errorf("%s: %s: %d bytes, want %d", network, name, len(got[name]), len(body))
			}
		}
		if links["link"] != "a" {
			t.Errorf("%s: links %v, want link → a", network, links)
		}
		if rest, err := io.ReadAll(peer); err != nil || len(bytes.TrimRight(rest, "\x00")) != 0 {
			t.Errorf("%s: after the tar's end: %d bytes, %v; want padding and the socket's end", network, len(rest), err)
		}
		if n, err := io.Copy(io.Discard, r); n != 0 || err != nil {
			t.Errorf("%s: the reader's end: %d bytes, %v; want none and a clean end", network, n, err)
		}
		_ = r.Close()
	}
	f, _ := socketPair(t, "tcp")
	if _, err := l.OpenArchiveTo(context.Background(), "d/a", f); !errors.Is(err, ports.ErrInvalidPath) {
		t.Errorf("an archive of a file: %v, want %v", err, ports.ErrInvalidPath)
	}
	_ = f.Close()
}

// An archive whose file grows while the helper sends it ends the reader
// with an error, and what reached the socket is no whole tar.
func TestAnArchiveToASocketThatFailsIsCutShort(t *testing.T) {
	l, dir := newLocal(t)
	p := filepath.Join(dir, "d", "f")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, make([]byte, 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	sock, peer := socketPair(t, "unix")
	r, err := l.OpenArchiveTo(context.Background(), "d", sock)
	_ = sock.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The socket holds far less than 8 MiB: the helper is mid-file.
	first := make([]byte, 64<<10)
	if _, err := io.ReadFull(peer, first); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	rest, _ := io.ReadAll(peer)
	if _, err := io.Copy(io.Discard, r); err == nil {
		t.Error("the reader ended cleanly")
	}
	_ = r.Close()
	// What came, read as a tar, never ends as one.
	tr := tar.NewReader(io.MultiReader(bytes.NewReader(first), bytes.NewReader(rest)))
	var terr error
	for terr == nil {
		if _, terr = tr.Next(); terr == nil {
			_, terr = io.Copy(io.Discard, tr)
		}
	}
	if errors.Is(terr, io.EOF) {
		t.Errorf("%d bytes that read as a whole tar", len(first)+len(rest))
	}
}
