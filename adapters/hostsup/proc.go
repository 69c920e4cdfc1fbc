package hostsup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
)

// procStat is what we need from /proc/<pid>/stat.
type procStat struct {
	state      byte   // R, S, D, Z, X, ...
	session    int    // session id
	startTicks uint64 // start time since boot; with the pid it names one process
}

func readProcStat(pid int) (procStat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// comm, in parentheses, may itself contain spaces and ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, errors.New("malformed stat")
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is field 3 (state) of proc(5); session is field 6, starttime 22.
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, errors.New("malformed stat")
	}
	sid, err1 := strconv.Atoi(f[3])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return procStat{}, errors.New("malformed stat")
	}
	return procStat{state: f[0][0], session: sid, startTicks: start}, nil
}

// dead reports whether a state means the process has exited.
func (st procStat) dead() bool { return st.state == 'Z' || st.state == 'X' || st.state == 'x' }

func readCmdline(pid int) ([]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	data = bytes.TrimSuffix(data, []byte{0})
	if len(data) == 0 {
		return nil, nil // a kernel thread or a zombie
	}
	return strings.Split(string(data), "\x00"), nil
}

// procUID is the real uid of the process, from its status: the owner of
// /proc/<pid> is root for an undumpable process, as agents are.
func procUID(pid int) (int, error) {
	uid, err := procUID32(pid)
	return int(uid), err
}

// procUID32 is procUID as a uid.
func procUID32(pid int) (uint32, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			uid, err := strconv.ParseUint(f[0], 10, 32)
			return uint32(uid), err
		}
	}
	return 0, errors.New("no Uid in status")
}

// processExists is kill(pid, 0): EPERM still means it exists.
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// agentLaunch is one agent process to start.
type agentLaunch struct {
	binary, id string
	env        []string
	// secret is handed to the agent over an inherited pipe (AGENT_SECRET_FD),
	// never through its environment or a file: racing a (re)start finds
	// nothing to read.
	secret string
	dir    string // working directory ("" for ours)
	// user, when set, is who the agent runs as; tmpDir (its own temp dir)
	// is given to it, with a copy of the binary and of its CA file, since
	// the server's files are not that user's to read.
	user    *AgentUser
	tmpDir  string
	logPath string // output is appended here
	pidPath string
	who     string // says who started it, in the log
}

// secretFD is the agent's descriptor for the secret pipe (the first of
// exec.Cmd.ExtraFiles).
const secretFD = 3

// startAgent starts an agent in its own session, so that the server's
// terminal and signals do not reach it and it outlives the server, and
// records its pid atomically: without its pid file a restarted server would
// start a duplicate. The process is reaped even after the caller is gone,
// so an agent that dies later is no zombie.
func startAgent(l agentLaunch) (*proc, error) {
	rotateLog(l.logPath)
	logf, err := os.OpenFile(l.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open agent log: %w", err)
	}
	defer logf.Close() // the child holds its own copy
	fmt.Fprintf(logf, "--- %s %s: starting %s\n", time.Now().UTC().Format(time.RFC3339), l.who, l.id)
	attr := &syscall.SysProcAttr{Setsid: true}
	if l.user != nil {
		if err := l.user.prepare(&l); err != nil {
			return nil, fmt.Errorf("start %s as %s: %w", l.id, l.user.Name, err)
		}
		l.user.launch(attr)
	}
	secretR, secretW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer secretR.Close() // the child holds its own copy
	// A pipe holds far more than a secret: the write never blocks.
	_, werr := io.WriteString(secretW, l.secret)
	if cerr := secretW.Close(); werr != nil || cerr != nil {
		return nil, fmt.Errorf("secret pipe: %w", errors.Join(werr, cerr))
	}
	cmd := &exec.Cmd{
		Path: l.binary, Args: []string{l.binary, "--id", l.id}, Env: append(l.env, fmt.Sprintf("AGENT_SECRET_FD=%d", secretFD)), Dir: l.dir,
		Stdout: logf, Stderr: logf, ExtraFiles: []*os.File{secretR},
		SysProcAttr: attr,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", l.binary, err)
	}
	p := &proc{pid: cmd.Process.Pid, startedAt: time.Now(), exited: make(chan struct{}), userNS: agentNS(cmd.Process.Pid), orphanUIDs: l.user.orphanUIDs()}
	go func() {
		p.waitErr = cmd.Wait()
		// Its commands die with it, before anyone may start its successor.
		p.endOrphans()
		close(p.exited)
	}()
	if err := writePidFile(l.pidPath, p.pid); err != nil {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		<-p.exited
		return nil, fmt.Errorf("write pid file: %w", err)
	}
	return p, nil
}

// agentNS is the user namespace of agent pid when it is not the server's.
func agentNS(pid int) string {
	if ns := userNS(pid); ns != userNS(os.Getpid()) {
		return ns
	}
	return ""
}

// notAgent says why pid is not a live process of this user running binary
// as the agent id, or "".
func notAgent(pid int, binary, id string, uid int) string {
	if pid == os.Getpid() {
		return "pid is this server"
	}
	if !processExists(pid) {
		return "no such process"
	}
	st, err := readProcStat(pid)
	if err != nil || st.dead() {
		return "process has exited"
	}
	if owner, err := procUID(pid); err != nil || owner != uid {
		return "process belongs to another user"
	}
	argv, err := readCmdline(pid)
	if err != nil || !isAgentCmdline(argv, binary, id) {
		return "process is not this agent"
	}
	// The cmdline read must be of the same process as the stat read.
	if st2, err := readProcStat(pid); err != nil || st2.startTicks != st.startTicks {
		return "process changed while checking"
	}
	return ""
}

func isAgentCmdline(argv []string, binary, id string) bool {
	if len(argv) < 3 || filepath.Base(argv[0]) != filepath.Base(binary) {
		return false
	}
	for i := 1; i+1 < len(argv); i++ {
		if argv[i] == "--id" && argv[i+1] == id {
			return true
		}
	}
	return false
}

// readPidFile returns the pid in path and the file's mtime (≈ when the agent
// was spawned).
func readPidFile(path string) (int, time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, time.Time{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, time.Time{}, err
	}
	buf := make([]byte, 32)
	n, _ := f.Read(buf)
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil || pid <= 0 {
		return 0, time.Time{}, fmt.Errorf("%s: not a pid: %q", path, bytes.TrimSpace(buf[:n]))
	}
	return pid, fi.ModTime(), nil
}

// writePidFile replaces path atomically, so a crash never leaves a torn
// pid that could name another process.
func writePidFile(path string, pid int) error {
	return fsatomic.WriteFile(path, []byte(strconv.Itoa(pid)+"\n"), 0o644)
}

// AgentTmpDir is the temp dir of the agent whose state lives at key (its
// environment's dir, or the supervisor's pid file): TMPDIR and TMUX_TMPDIR
// of the agent, so its tmux server, session files and its commands' temp
// files are its own. Short, because tmux puts its socket in it and a unix
// socket path is at most 107 bytes.
func AgentTmpDir(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(os.TempDir(), "agentic-"+hex.EncodeToString(sum[:6]))
}

// agentTmpEnv makes dir and returns the variables that send an agent there.
func agentTmpEnv(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return []string{"TMUX_TMPDIR=" + dir, "TMPDIR=" + dir}, nil
}

// EndTmux stops the tmux server of an agent's temp dir (its own, or its
// user's home in it), if one runs, and with it every session it kept. The
// server is asked as the user it runs as (u; nil for this server's user),
// whose socket directory is named by its uid.
func EndTmux(ctx context.Context, dir string, u *AgentUser) {
	if _, err := exec.LookPath("tmux"); err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, d := range []string{dir, UserHome(dir)} {
		if _, err := os.Stat(d); err != nil {
			continue
		}
		kill := exec.CommandContext(ctx, "tmux", "kill-server")
		kill.Env = append(os.Environ(), "TMUX_TMPDIR="+d)
		if u != nil {
			kill.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{u.GID}}}
		}
		_ = kill.Run() // no server: nothing to end
	}
}

// maxAgentLog is the size past which an agent's log is rotated when the
// agent (re)starts: the current log becomes <log>.1 (replacing the older
// one), so an agent's logs take at most about twice this.
const maxAgentLog = 8 << 20

func rotateLog(path string) {
	if fi, err := os.Stat(path); err == nil && fi.Size() > maxAgentLog {
		_ = os.Rename(path, path+".1")
	}
}

// uidOf is the uid agent processes run as: u's, else this process's.
func uidOf(u *AgentUser) int {
	switch {
	case u == nil:
		return os.Geteuid()
	case u.AgentUID != 0:
		return int(u.AgentUID)
	}
	return int(u.UID)
}

// AgentUser is who a host agent and its commands run as when the server is
// root: the workload user (Name, UID, GID) its commands, tmux server and
// file work run as, and, when AgentUID is set, the agent process's own uid.
// The agent then runs as root of a user namespace that maps only those two
// uids: it may switch to its workload's uid and signal its commands, while
// they can neither signal it nor read its memory, and neither can read
// anything of root's, such as the data dir.
type AgentUser struct {
	Name     string
	UID, GID uint32
	// AgentUID and AgentGID are the agent process's ids; 0 runs the agent
	// as the workload user itself.
	AgentUID, AgentGID uint32
	// Shared is set when the workload user is shared with other agents
	// (AGENTIC_HOST_USER): its processes are not all this agent's.
	Shared bool
}

// orphanUIDs are the uids a dead agent's leftovers may run as (none for
// the server's own user, whose processes are not the agent's alone).
func (u *AgentUser) orphanUIDs() []uint32 {
	if u == nil || u.AgentUID == 0 {
		return nil
	}
	return []uint32{u.UID, u.AgentUID}
}

// launch sets who the process starts as.
func (u *AgentUser) launch(attr *syscall.SysProcAttr) {
	if u.AgentUID == 0 {
		attr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{u.GID}}
		return
	}
	attr.Cloneflags = syscall.CLONE_NEWUSER
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(u.AgentUID), Size: 1}, {ContainerID: int(u.UID), HostID: int(u.UID), Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(u.AgentGID), Size: 1}, {ContainerID: int(u.GID), HostID: int(u.GID), Size: 1}}
	// The agent sets its commands' groups (only mapped ones exist inside).
	attr.GidMappingsEnableSetgroups = true
	attr.Credential = &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}}
}

// prepare gives the user what it may reach. The temp dir stays root's
// (0711: the user cannot rename or replace anything in it) and holds the
// copies of the binary (execute-only, so the kernel starts the agent
// undumpable: nothing can read its memory or /proc files even before it
// says so itself) and of the CA file; the user's own home inside it
// (0700, the user's) is its HOME, TMPDIR, TMUX_TMPDIR and working dir; a
// separated agent keeps its identity in a directory of its own uid.
// Nothing is changed inside that home but its own ownership, so a user
// cannot steer a root operation elsewhere through a symbolic link there.
func (u *AgentUser) prepare(l *agentLaunch) error {
	if l.tmpDir == "" {
		return errors.New("no temp dir for the agent")
	}
	if err := os.MkdirAll(l.tmpDir, 0o711); err != nil { //nolint:gosec // search only, for the agent's user: it owns nothing here
		return err
	}
	if err := os.Lchown(l.tmpDir, 0, 0); err != nil {
		return err
	}
	if err := os.Chmod(l.tmpDir, 0o711); err != nil { //nolint:gosec // search only, for the agent's user
		return err
	}
	bin := filepath.Join(l.tmpDir, filepath.Base(l.binary))
	if err := copyFile(l.binary, bin, 0o111); err != nil {
		return fmt.Errorf("agent binary: %w", err)
	}
	l.binary = bin
	for i, kv := range l.env {
		if path, ok := strings.CutPrefix(kv, "MANAGEMENT_CA="); ok && path != "" {
			ca := filepath.Join(l.tmpDir, "ca.pem")
			if err := copyFile(path, ca, 0o444); err != nil {
				return fmt.Errorf("CA file: %w", err)
			}
			l.env[i] = "MANAGEMENT_CA=" + ca
		}
	}
	home := UserHome(l.tmpDir)
	if err := ownDir(home, u.UID, u.GID); err != nil {
		return err
	}
	identityDir := home
	if u.AgentUID != 0 {
		identityDir = filepath.Join(l.tmpDir, "agent")
		if err := ownDir(identityDir, u.AgentUID, u.AgentGID); err != nil {
			return err
		}
		// The agent is root of its namespace: its commands, tmux server
		// and file work run as the workload user.
		l.env = append(l.env, "AGENT_RUN_AS="+u.Name, "AGENT_RUN_AS_HOME="+home, "AGENT_TMUX=on")
	}
	for i, kv := range l.env {
		// The temp dir is root's: the agent keeps a rename in a dir of its own.
		if strings.HasPrefix(kv, "AGENT_IDENTITY_FILE=") {
			l.env[i] = "AGENT_IDENTITY_FILE=" + filepath.Join(identityDir, ".agent-identity")
		}
	}
	l.dir = home
	l.env = append(l.env, "HOME="+home, "TMPDIR="+home, "TMUX_TMPDIR="+home, "USER="+u.Name, "LOGNAME="+u.Name)
	// The server's PATH (root's: /root/go/bin first, say) is not the
	// user's: only what it can search is kept, so a missing program is
	// "not found" (127) rather than a "permission denied" on the way.
	path, _ := lastEnv(l.env, "PATH")
	l.env = append(withoutEnv(l.env, "PATH"), "PATH="+usablePath(path, u.UID, u.GID))
	return nil
}

// DefaultPath is a host agent's PATH when its user can search no entry of
// the server's.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// usablePath is path without the entries uid:gid cannot search (relative
// ones, repeats, and those with a directory on the way it may not enter,
// by the mode bits), in order; DefaultPath when nothing is left.
func usablePath(path string, uid, gid uint32) string {
	var kept []string
	seen := map[string]bool{}
	for _, d := range filepath.SplitList(path) {
		if !filepath.IsAbs(d) || seen[d] {
			continue
		}
		seen[d] = true
		if searchable(d, uid, gid) {
			kept = append(kept, d)
		}
	}
	if len(kept) == 0 {
		return DefaultPath
	}
	return strings.Join(kept, string(filepath.ListSeparator))
}

// searchable says whether uid:gid (with no other groups) may search dir
// and every directory on the way to it, as written and once its symbolic
// links are resolved.
func searchable(dir string, uid, gid uint32) bool {
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false
	}
	for _, p := range []string{filepath.Clean(dir), resolved} {
		for d := p; ; d = filepath.Dir(d) {
			fi, err := os.Stat(d)
			if err != nil || !fi.IsDir() {
				return false
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				return false
			}
			if uid != 0 {
				bit := os.FileMode(0o001)
				switch {
				case st.Uid == uid:
					bit = 0o100
				case st.Gid == gid:
					bit = 0o010
				}
				if fi.Mode().Perm()&bit == 0 {
					return false
				}
			}
			if d == "/" {
				break
			}
		}
	}
	return true
}

// lastEnv is key's value in env (the last entry wins, as in exec.Cmd).
func lastEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v, true
		}
	}
	return "", false
}

// withoutEnv is env without key's entries.
func withoutEnv(env []string, key string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// ownDir makes dir (0700) and gives it to uid:gid.
func ownDir(dir string, uid, gid uint32) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.Lchown(dir, int(uid), int(gid))
}

// UserHome is the home (and temp dir) of an agent run as another user,
// inside its temp dir.
func UserHome(tmpDir string) string { return filepath.Join(tmpDir, "home") }

// copyFile copies src to dst (replaced atomically) with perm.
func copyFile(src, dst string, perm os.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return fsatomic.WriteFile(dst, data, perm)
}
