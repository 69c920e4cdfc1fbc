package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY returns a master and its slave, sized 200×50.
func openPTY() (master, slave *os.File, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		return nil, nil, err
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 50, Col: 200}); err != nil {
		m.Close()
		s.Close()
		return nil, nil, err
	}
	return m, s, nil
}

// startInPTY runs name args on a new PTY as its controlling terminal.
func startInPTY(name string, args ...string) (*exec.Cmd, *os.File, error) {
	m, s, err := openPTY()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s, s, s
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = cmd.Start()
	s.Close()
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return cmd, m, nil
}

func rssKiB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, errors.New("no VmRSS")
}

// echoLoop types n+warm printable bytes one at a time; each round trip is
// from writing the byte to reading it back.
func echoLoop(name string, n int, write func(b byte) error, readBack func(b byte) error) (stats, error) {
	const warm = 50 // canonical mode holds 4095 bytes per line: n+warm must stay below
	if n+warm >= 4000 {
		return stats{}, fmt.Errorf("%s: at most %d round trips", name, 4000-warm-1)
	}
	i := 0
	one := func() error {
		b := byte('a' + i%26)
		i++
		if err := write(b); err != nil {
			return err
		}
		return readBack(b)
	}
	for range warm {
		if err := one(); err != nil {
			return stats{}, fmt.Errorf("%s: warm-up: %w", name, err)
		}
	}
	return measure(name, n, one)
}

// byteReader reads until b is the next byte; pending holds what was read
// beyond it.
type byteReader struct {
	r       io.Reader
	buf     []byte
	pending []byte
}

func (br *byteReader) expect(b byte) error {
	for len(br.pending) == 0 {
		k, err := br.r.Read(br.buf)
		if err != nil {
			return err
		}
		br.pending = br.buf[:k]
	}
	if br.pending[0] != b {
		return fmt.Errorf("echo %q, want %q", br.pending[0], b)
	}
	br.pending = br.pending[1:]
	return nil
}

// readTimed reads r until it fails (EOF, or EIO on a PTY master) and returns
// how many bytes came and when the first one did.
func readTimed(r io.Reader) (got int64, first time.Time) {
	buf := make([]byte, 64<<10)
	for {
		k, err := r.Read(buf)
		if k > 0 && first.IsZero() {
			first = time.Now()
		}
		got += int64(k)
		if err != nil {
			return got, first
		}
	}
}
