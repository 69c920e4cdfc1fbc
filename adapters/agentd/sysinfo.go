package agentd

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
)

// cpuSampler turns /proc/stat counters into a busy percentage between calls.
type cpuSampler struct {
	lastIdle, lastTotal uint64
}

func (c *cpuSampler) sample() float64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0
	}
	var total, idle uint64
	for i, f := range fields[1:] {
		v, _ := strconv.ParseUint(f, 10, 64)
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	dTotal, dIdle := total-c.lastTotal, idle-c.lastIdle
	first := c.lastTotal == 0
	c.lastTotal, c.lastIdle = total, idle
	if first || dTotal == 0 {
		return 0
	}
	return 100 * float64(dTotal-dIdle) / float64(dTotal)
}

func readMetrics(cpu *cpuSampler) *sandboxv1.Metrics {
	m := &sandboxv1.Metrics{CpuPercent: cpu.sample()}
	if total, avail, ok := memInfo(); ok {
		m.MemoryTotalBytes = total
		m.MemoryUsedBytes = total - avail
	}
	var st syscall.Statfs_t
	if syscall.Statfs("/", &st) == nil {
		m.DiskTotalBytes = st.Blocks * uint64(st.Bsize)             //nolint:gosec // statfs block size is positive
		m.DiskUsedBytes = (st.Blocks - st.Bfree) * uint64(st.Bsize) //nolint:gosec // statfs block size is positive
	}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(data))
		if len(f) >= 3 {
			m.LoadAvg_1, _ = strconv.ParseFloat(f[0], 64)
			m.LoadAvg_5, _ = strconv.ParseFloat(f[1], 64)
			m.LoadAvg_15, _ = strconv.ParseFloat(f[2], 64)
		}
	}
	return m
}

func memInfo() (total, available uint64, ok bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseUint(fields[1], 10, 64)
		switch fields[0] {
		case "MemTotal:":
			total = v * 1024
		case "MemAvailable:":
			available = v * 1024
		}
	}
	return total, available, total > 0
}

func systemInfo() *sandboxv1.SystemInfo {
	si := &sandboxv1.SystemInfo{Os: runtime.GOOS, Arch: runtime.GOARCH, CpuCores: uint32(runtime.NumCPU())} //nolint:gosec // a CPU count
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		si.Kernel = utsString(u.Release[:])
	}
	if total, _, ok := memInfo(); ok {
		si.MemoryBytes = total
	}
	var st syscall.Statfs_t
	if syscall.Statfs("/", &st) == nil {
		si.DiskBytes = st.Blocks * uint64(st.Bsize) //nolint:gosec // statfs block size is positive
	}
	return si
}

func utsString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c)) //nolint:gosec // uname bytes are ASCII
	}
	return string(out)
}

// primaryIP is the first non-loopback IPv4 address, for operators to recognise the agent.
func primaryIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return "127.0.0.1"
}
