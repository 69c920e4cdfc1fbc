package agentd

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

const procTCPHeader = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"

// procLine is one line of /proc/net/tcp* as the kernel prints it.
func procLine(sl int, local, state string, inode uint64) string {
	return fmt.Sprintf("%4d: %s 00000000:0000 %s 00000000:00000000 00:00000000 00000000  1000        0 %d 1 0000000000000000 100 0 0 10 0\n", sl, local, state, inode)
}

func TestParseProcNetTCP(t *testing.T) {
	le := binary.LittleEndian
	sock := func(a string, port uint16, inode uint64) listenSocket {
		return listenSocket{Addr: netip.MustParseAddr(a), Port: port, Inode: inode}
	}
	for _, tc := range []struct {
		name  string
		text  string
		ipv6  bool
		order binary.ByteOrder
		want  []listenSocket
	}{
		{"ipv4", procTCPHeader +
			procLine(0, "0100007F:1F90", "0A", 1001) + // 127.0.0.1:8080
			procLine(1, "00000000:0016", "0A", 1002) + // 0.0.0.0:22
			procLine(2, "0100007F:A2C4", "01", 1003) + // established: not listening
			procLine(3, "0A00020F:1435", "0A", 0), // 15.2.0.10:5173; inode 0 (no process holds it)
			false, le, []listenSocket{sock("127.0.0.1", 8080, 1001), sock("0.0.0.0", 22, 1002), sock("15.2.0.10", 5173, 0)}},
		{"ipv6", procTCPHeader +
			procLine(0, "00000000000000000000000000000000:0050", "0A", 2001) + // [::]:80
			procLine(1, "00000000000000000000000001000000:1435", "0A", 2002) + // [::1]:5173
			procLine(2, "0000000000000000FFFF00000100007F:0BB8", "0A", 2003) + // [::ffff:127.0.0.1]:3000
			procLine(3, "00000000000000000000000001000000:1436", "06", 2004), // TIME_WAIT
			true, le, []listenSocket{sock("::", 80, 2001), sock("::1", 5173, 2002), sock("::ffff:127.0.0.1", 3000, 2003)}},
		{"big-endian machine", procTCPHeader + procLine(0, "7F000001:1F90", "0A", 7), false, binary.BigEndian,
			[]listenSocket{sock("127.0.0.1", 8080, 7)}},
		{"lines it cannot read are skipped", procTCPHeader +
			"garbage\n" +
			"   0: 0100007F:1F90 00000000:0000 0A\n" + // short
			procLine(1, "0100007F1F90", "0A", 1) + // no colon
			procLine(2, "0100007F:1F9", "0A", 1) + // short port
			procLine(3, "0100007F:0000", "0A", 1) + // port 0
			procLine(4, "0100007G:1F90", "0A", 1) + // not hex
			procLine(5, "00000000000000000000000001000000:1F90", "0A", 1) + // a v6 address in tcp
			"   7: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 0 notanumber 1\n" +
			procLine(8, "0100007F:0050", "0A", 9),
			false, le, []listenSocket{sock("127.0.0.1", 80, 9)}},
		{"empty", "", false, le, nil},
		{"header only", procTCPHeader, true, le, nil},
		{"an ipv4 address in tcp6", procTCPHeader + procLine(0, "0100007F:1F90", "0A", 1), true, le, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parseProcNetTCP([]byte(tc.text), tc.ipv6, tc.order)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %v\nwant %v", got, tc.want)
			}
		})
	}
}

func FuzzParseProcNetTCP(f *testing.F) {
	f.Add([]byte(procTCPHeader+procLine(0, "0100007F:1F90", "0A", 1001)+procLine(1, "00000000:0016", "01", 2)), false)
	f.Add([]byte(procTCPHeader+procLine(0, "0000000000000000FFFF00000100007F:0BB8", "0A", 2003)), true)
	f.Add([]byte("   0: 0100007F:1F90 00000000:0000 0A 0 0 0 0 0 18446744073709551615\n"), false)
	f.Add([]byte(":\n: : : 0A : : : : :\n"), true)
	f.Fuzz(func(t *testing.T, text []byte, ipv6 bool) {
		for _, s := range parseProcNetTCP(text, ipv6, binary.LittleEndian) {
			if s.Port == 0 || !s.Addr.IsValid() || s.Addr.Zone() != "" || s.Addr.Is4() == ipv6 {
				t.Fatalf("parsed %+v (ipv6 %v) from %q", s, ipv6, text)
			}
		}
	})
}

// fakeProcTree writes a /proc tree: net/tcp and net/tcp6, and per pid its
// comm and its fds linking to sockets.
func fakeProcTree(t *testing.T, tcp, tcp6 string, procs map[string]map[string]string) string {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "net"), 0o755))
	must(os.WriteFile(filepath.Join(root, "net", "tcp"), []byte(tcp), 0o644))
	if tcp6 != "" {
		must(os.WriteFile(filepath.Join(root, "net", "tcp6"), []byte(tcp6), 0o644))
	}
	for pid, files := range procs {
		must(os.MkdirAll(filepath.Join(root, pid, "fd"), 0o755))
		for name, v := range files {
			if name == "comm" {
				must(os.WriteFile(filepath.Join(root, pid, "comm"), []byte(v), 0o644))
				continue
			}
			must(os.Symlink(v, filepath.Join(root, pid, "fd", name)))
		}
	}
	return root
}

func TestPortScannerNamesEachPortByItsProcess(t *testing.T) {
	root := fakeProcTree(t,
		procTCPHeader+
			procLine(0, "0100007F:1435", "0A", 111)+ // 127.0.0.1:5173, vite
			procLine(1, "00000000:0050", "0A", 222)+ // 0.0.0.0:80, twice (SO_REUSEPORT), one socket named
			procLine(2, "00000000:0050", "0A", 223)+
			procLine(3, "00000000:0016", "0A", 333), // 0.0.0.0:22, nobody readable holds it
		procTCPHeader+procLine(0, "00000000000000000000000001000000:1435", "0A", 444), // [::1]:5173
		map[string]map[string]string{
			"100":  {"comm": "vite\n", "0": "/dev/null", "3": "socket:[111]", "4": "socket:[444]"},
			"200":  {"comm": "nginx\n", "7": "socket:[223]"},
			"self": {"comm": "not a pid\n", "3": "socket:[333]"},
			"300":  {"comm": "bad\x1b[31m\xffname\n", "5": "socket:[999]"},
		})
	s := newPortScanner(root)
	s.order = binary.LittleEndian
	want := ports.ListeningPorts{Ports: []ports.ListeningPort{
		{Port: 22, Address: "0.0.0.0", Family: ports.FamilyIPv4},
		{Port: 80, Address: "0.0.0.0", Family: ports.FamilyIPv4, Process: "nginx"},
		{Port: 5173, Address: "127.0.0.1", Family: ports.FamilyIPv4, Process: "vite"},
		{Port: 5173, Address: "::1", Family: ports.FamilyIPv6, Process: "vite"},
	}}
	if got := s.scan(); !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	// Names are kept by inode: a known socket does not walk /proc again,
	// a socket that went is forgotten.
	if err := os.WriteFile(filepath.Join(root, "100", "comm"), []byte("renamed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := s.scan(); !reflect.DeepEqual(got, want) {
		t.Fatalf("second scan: %+v", got)
	}
	if err := os.WriteFile(filepath.Join(root, "net", "tcp"), []byte(procTCPHeader+procLine(0, "00000000:0050", "0A", 222)), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := s.scan(); len(got.Ports) != 2 || got.Ports[0].Port != 80 || got.Ports[0].Process != "" {
		t.Fatalf("after 5173/ipv4 and 22 went: %+v", got)
	}
	if _, ok := s.names[111]; ok {
		t.Fatalf("the name of a socket that went is kept: %v", s.names)
	}
}

func TestPortScannerKeepsTheLowestPorts(t *testing.T) {
	var b strings.Builder
	b.WriteString(procTCPHeader)
	n := ports.MaxListeningPorts + 50
	for i := range n {
		b.WriteString(procLine(i, fmt.Sprintf("00000000:%04X", 60000-i), "0A", uint64(i+1)))
	}
	s := newPortScanner(fakeProcTree(t, b.String(), "", nil))
	got := s.scan()
	if !got.Truncated || len(got.Ports) != ports.MaxListeningPorts {
		t.Fatalf("%d ports, truncated %v", len(got.Ports), got.Truncated)
	}
	if first, last := got.Ports[0].Port, got.Ports[len(got.Ports)-1].Port; first != uint16(60000-n+1) || last != uint16(60000-n+ports.MaxListeningPorts) {
		t.Fatalf("ports %d..%d", first, last)
	}
}

func TestCleanProcessName(t *testing.T) {
	for in, want := range map[string]string{
		"vite\n":                       "vite",
		"a\x1b[2Jb":                    "a?[2Jb",
		"\xff\xfeok":                   "?ok",
		strings.Repeat("é", 40) + "\n": strings.Repeat("é", 32),
		"":                             "",
	} {
		if got := cleanProcessName(in); got != want {
			t.Errorf("cleanProcessName(%q) = %q, want %q", in, got, want)
		}
	}
}

// The real /proc: a socket this test listens on is seen, named by this
// process, and gone once closed.
func TestPortScannerSeesARealListener(t *testing.T) {
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port) //nolint:gosec // a TCP port
	want := ports.ListeningPort{Port: port, Address: "127.0.0.1", Family: ports.FamilyIPv4, Process: cleanProcessName(string(comm))}
	s := newPortScanner("/proc")
	if got := s.scan(); !containsPort(got, want) {
		t.Fatalf("%+v not in %+v", want, got.Ports)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if got := s.scan(); hasPort(got, port, "127.0.0.1") {
		t.Fatalf("closed port %d still listed: %+v", port, got.Ports)
	}
}

func containsPort(l ports.ListeningPorts, p ports.ListeningPort) bool {
	for _, q := range l.Ports {
		if q == p {
			return true
		}
	}
	return false
}

func hasPort(l ports.ListeningPorts, port uint16, addr string) bool {
	for _, q := range l.Ports {
		if q.Port == port && q.Address == addr {
			return true
		}
	}
	return false
}

// The agent sends its list on connecting, again after a reconnect, and
// each time it changes.
func TestAgentReportsListeningPortsAsTheyChange(t *testing.T) {
	cp, url := startCP(t)
	cfg := testConfig(url, newFakeRunner())
	cfg.PortsInterval = 50 * time.Millisecond
	runAgent(t, cfg)
	s := cp.nextSession(t)
	// nextReport returns the next ports report the agent sends.
	nextReport := func(s *cpSession) ports.ListeningPorts {
		t.Helper()
		for {
			if r := s.recv(t).GetPortsReport(); r != nil {
				l, err := agentwire.ListeningPorts(r) // what the server accepts
				if err != nil {
					t.Fatalf("the server would refuse %v: %v", r, err)
				}
				return l
			}
		}
	}
	nextReport(s) // the list on connecting

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port) //nolint:gosec // a TCP port
	deadline := time.Now().Add(waitTimeout)
	for l := nextReport(s); !hasPort(l, port, "127.0.0.1"); l = nextReport(s) {
		if time.Now().After(deadline) {
			t.Fatalf("port %d never reported", port)
		}
	}
	// A new connection gets the whole list at once, unchanged or not.
	s.dropStream(t)
	s = cp.nextSession(t)
	if l := nextReport(s); !hasPort(l, port, "127.0.0.1") {
		t.Fatalf("the list on reconnecting lacks port %d: %+v", port, l.Ports)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	for l := nextReport(s); hasPort(l, port, "127.0.0.1"); l = nextReport(s) {
		if time.Now().After(deadline.Add(waitTimeout)) {
			t.Fatalf("closed port %d still reported", port)
		}
	}
}
