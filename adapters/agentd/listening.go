package agentd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Ports seen: the agent reads the TCP sockets listening in its network
// namespace from /proc/net/tcp and /proc/net/tcp6, names each by a process
// holding it (socket inode → /proc/<pid>/fd → /proc/<pid>/comm, for the
// processes it may read), and sends the whole list when it changes.

// defaultPortsInterval is how often the agent looks at its listening ports.
const defaultPortsInterval = 2 * time.Second

// tcpListen is the LISTEN state in /proc/net/tcp's st column.
const tcpListen = "0A"

// listenSocket is one listening socket of /proc/net/tcp*.
type listenSocket struct {
	Addr  netip.Addr
	Port  uint16
	Inode uint64
}

// parseProcNetTCP reads the text of /proc/net/tcp (ipv6 false) or
// /proc/net/tcp6 (true) and returns its sockets in the LISTEN state. The
// kernel prints each 32-bit word of an address as a number in the
// machine's byte order (order); lines it cannot read are skipped.
func parseProcNetTCP(text []byte, ipv6 bool, order binary.ByteOrder) []listenSocket {
	var out []listenSocket
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 512), 64<<10)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(f) < 10 || f[3] != tcpListen || !strings.HasSuffix(f[0], ":") {
			continue
		}
		hostHex, portHex, ok := strings.Cut(f[1], ":")
		if !ok || len(portHex) != 4 {
			continue
		}
		port, err := strconv.ParseUint(portHex, 16, 16)
		if err != nil || port == 0 {
			continue
		}
		addr, ok := procAddr(hostHex, ipv6, order)
		if !ok {
			continue
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, listenSocket{Addr: addr, Port: uint16(port), Inode: inode})
	}
	return out
}

// procAddr decodes an address of /proc/net/tcp*: 8 (IPv4) or 32 (IPv6)
// hex digits, 32-bit words in the machine's byte order.
func procAddr(h string, ipv6 bool, order binary.ByteOrder) (netip.Addr, bool) {
	want := 8
	if ipv6 {
		want = 32
	}
	if len(h) != want {
		return netip.Addr{}, false
	}
	raw, err := hex.DecodeString(h)
	if err != nil {
		return netip.Addr{}, false
	}
	var b [16]byte
	for i := 0; i < len(raw); i += 4 {
		order.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	if !ipv6 {
		return netip.AddrFrom4([4]byte(b[:4])), true
	}
	return netip.AddrFrom16(b), true
}

// portScanner lists the listening ports under a /proc tree, keeping the
// process names it found by inode so that /proc/<pid>/fd is walked only
// when a socket it has not seen appears.
type portScanner struct {
	proc  string
	order binary.ByteOrder
	names map[uint64]string
}

func newPortScanner(proc string) *portScanner {
	return &portScanner{proc: proc, order: binary.NativeEndian, names: map[uint64]string{}}
}

// scan returns the listening ports now: one per address, family and port,
// sorted, at most ports.MaxListeningPorts.
func (s *portScanner) scan() ports.ListeningPorts {
	type key struct {
		addr netip.Addr
		port uint16
	}
	seen := map[key]ports.ListeningPort{}
	inodes := map[key][]uint64{}
	for _, t := range []struct {
		file string
		ipv6 bool
	}{{"tcp", false}, {"tcp6", true}} {
		text, err := os.ReadFile(filepath.Join(s.proc, "net", t.file))
		if err != nil {
			continue // no IPv6 in this kernel, or no /proc
		}
		family := ports.FamilyIPv4
		if t.ipv6 {
			family = ports.FamilyIPv6
		}
		for _, so := range parseProcNetTCP(text, t.ipv6, s.order) {
			k := key{so.Addr, so.Port}
			seen[k] = ports.ListeningPort{Port: so.Port, Address: so.Addr.String(), Family: family}
			inodes[k] = append(inodes[k], so.Inode)
		}
	}
	var missing []uint64
	live := map[uint64]bool{}
	for _, ins := range inodes {
		for _, in := range ins {
			live[in] = true
			if _, ok := s.names[in]; !ok && in != 0 {
				missing = append(missing, in)
			}
		}
	}
	for in := range s.names {
		if !live[in] {
			delete(s.names, in)
		}
	}
	if len(missing) > 0 {
		found := socketOwners(s.proc, missing)
		for _, in := range missing {
			s.names[in] = found[in] // "" when no readable process holds it
		}
	}
	out := ports.ListeningPorts{Ports: make([]ports.ListeningPort, 0, len(seen))}
	for k, p := range seen {
		for _, in := range inodes[k] {
			if n := s.names[in]; n != "" {
				p.Process = n
				break
			}
		}
		out.Ports = append(out.Ports, p)
	}
	agentwire.SortListeningPorts(out.Ports)
	if len(out.Ports) > ports.MaxListeningPorts {
		out.Ports, out.Truncated = out.Ports[:ports.MaxListeningPorts], true
	}
	return out
}

// socketOwners finds, for each inode it can, the name of a process that
// holds the socket: it reads the fd links of every process it may read.
func socketOwners(proc string, inodes []uint64) map[uint64]string {
	want := map[string]uint64{}
	for _, in := range inodes {
		want["socket:["+strconv.FormatUint(in, 10)+"]"] = in
	}
	found := map[uint64]string{}
	pids, err := os.ReadDir(proc)
	if err != nil {
		return found
	}
	for _, pid := range pids {
		if len(found) == len(want) {
			break
		}
		if _, err := strconv.ParseUint(pid.Name(), 10, 32); err != nil {
			continue
		}
		dir := filepath.Join(proc, pid.Name())
		fds, err := os.ReadDir(filepath.Join(dir, "fd"))
		if err != nil {
			continue // another user's process, or gone
		}
		var name string
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
			if err != nil {
				continue
			}
			in, ok := want[link]
			if !ok {
				continue
			}
			if _, have := found[in]; have {
				continue
			}
			if name == "" {
				name = processName(dir)
				if name == "" {
					break
				}
			}
			found[in] = name
		}
	}
	return found
}

// processName is /proc/<pid>/comm made fit for the link: valid UTF-8,
// no control characters, at most ports.MaxProcessNameBytes.
func processName(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "comm"))
	if err != nil {
		return ""
	}
	return cleanProcessName(string(b))
}

func cleanProcessName(s string) string {
	s = strings.TrimSuffix(s, "\n")
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
	for len(s) > ports.MaxProcessNameBytes {
		_, n := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-n]
	}
	return s
}

// portsLoop sends the listening ports on connecting and each time they
// change, looking every interval, until ctx ends (the connection's end).
func (a *Agent) portsLoop(ctx context.Context) {
	interval := a.cfg.PortsInterval
	if interval < 0 {
		return
	}
	if interval == 0 {
		interval = defaultPortsInterval
	}
	var sent *ports.ListeningPorts
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		now := a.ports.scan()
		if sent == nil || !sameListening(*sent, now) {
			m := &sandboxv1.ConnectRequest{Payload: &sandboxv1.ConnectRequest_PortsReport{PortsReport: agentwire.PortsReport(now)}}
			select {
			case a.control <- m:
				sent = &now
			default: // full: tried again at the next look
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func sameListening(a, b ports.ListeningPorts) bool {
	return a.Truncated == b.Truncated && slices.Equal(a.Ports, b.Ports)
}
