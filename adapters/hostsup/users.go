package hostsup

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
)

// DefaultUIDs is the uid range host agents' users are taken from when the
// server is root: above the distributions' system and dynamic ranges and
// below the 100000 where subordinate id ranges usually start.
const DefaultUIDs = "70000-79999"

// UsersConfig says where host agents' users come from.
type UsersConfig struct {
	// File keeps which agent holds which slot of the range (JSON, 0600).
	File string
	// First and Last bound the uid range, inclusive. Each slot takes two
	// uids: the agent process's (First+2s, no passwd entry) and its
	// workload's (First+2s+1, a system user agentic-<uid>, created or
	// reused, with the same gid).
	First, Last uint32
	// ClaimDir holds one file per slot taken by any server on this
	// machine, so that two servers never hand out the same uids (default
	// /run/agentic-sandbox/host-uids).
	ClaimDir string
	// Shared, when set, is the one existing user every workload runs as
	// instead of a user per agent (AGENTIC_HOST_USER): workloads are then
	// apart from their agents but not from one another.
	Shared *user.User
	Logger *slog.Logger
}

// Users hands out host agents' users, like systemd's dynamic users: each
// agent process and its workload get uids of their own, so nothing one
// agent's commands do as their uid reaches another agent's processes,
// sockets or files, or their own agent.
type Users struct {
	cfg UsersConfig
	log *slog.Logger
	mu  sync.Mutex
}

// DefaultClaimDir is where servers on one machine claim their slots.
const DefaultClaimDir = "/run/agentic-sandbox/host-uids"

// NewUsers checks the range; nothing is created before Acquire.
func NewUsers(cfg UsersConfig) (*Users, error) {
	if cfg.File == "" {
		return nil, errors.New("hostsup: users: no file")
	}
	if cfg.First == 0 || cfg.Last < cfg.First+1 {
		return nil, fmt.Errorf("hostsup: users: range %d-%d holds no slot", cfg.First, cfg.Last)
	}
	if cfg.ClaimDir == "" {
		cfg.ClaimDir = DefaultClaimDir
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Users{cfg: cfg, log: log.With("component", "host-users")}, nil
}

// ParseUIDRange reads "FIRST-LAST".
func ParseUIDRange(s string) (first, last uint32, err error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	f, err1 := strconv.ParseUint(a, 10, 32)
	l, err2 := strconv.ParseUint(b, 10, 32)
	if !ok || err1 != nil || err2 != nil || f == 0 || l < f+1 || l >= 1<<31 {
		return 0, 0, fmt.Errorf("%q: want FIRST-LAST, two uids or more above 0", s)
	}
	return uint32(f), uint32(l), nil
}

func (u *Users) slots() uint32 { return (u.cfg.Last - u.cfg.First + 1) / 2 }

func (u *Users) agentUID(slot uint32) uint32    { return u.cfg.First + 2*slot }
func (u *Users) workloadUID(slot uint32) uint32 { return u.cfg.First + 2*slot + 1 }

// workloadName is the passwd name of a slot's workload user.
func workloadName(uid uint32) string { return fmt.Sprintf("agentic-%d", uid) }

// heldSlot is what the users file keeps per agent.
type heldSlot struct {
	AgentUID uint32 `json:"agent_uid"`
	UID      uint32 `json:"uid"`
	// Shared: UID is the shared user's, not this agent's alone.
	Shared bool `json:"shared,omitempty"`
}

func loadHeld(file string) (map[string]heldSlot, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]heldSlot{}, nil
	}
	if err != nil {
		return nil, err
	}
	m := map[string]heldSlot{}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return m, nil
}

func (u *Users) save(m map[string]heldSlot) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return fsatomic.WriteFile(u.cfg.File, append(data, '\n'), 0o600)
}

// lockClaims holds the machine-wide claim lock until the returned func.
func (u *Users) lockClaims() (func(), error) {
	if err := os.MkdirAll(u.cfg.ClaimDir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(u.cfg.ClaimDir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

func (u *Users) claimPath(agentUID uint32) string {
	return filepath.Join(u.cfg.ClaimDir, strconv.FormatUint(uint64(agentUID), 10))
}

// claimHolder is the users file and key a claim names.
func (u *Users) claimHolder(agentUID uint32) (file, key string, ok bool) {
	data, err := os.ReadFile(u.claimPath(agentUID))
	if err != nil {
		return "", "", false
	}
	file, key, ok = strings.Cut(strings.TrimSpace(string(data)), "\n")
	return file, key, ok
}

// claimFree reports whether agentUID's claim is absent or stale: its
// holder no longer keeps that slot under that key.
func (u *Users) claimFree(agentUID uint32) bool {
	file, key, ok := u.claimHolder(agentUID)
	if !ok {
		return true
	}
	m, err := loadHeld(file)
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	h, held := m[key]
	return !held || h.AgentUID != agentUID
}

func (u *Users) claim(agentUID uint32, key string) error {
	return fsatomic.WriteFile(u.claimPath(agentUID), []byte(u.cfg.File+"\n"+key+"\n"), 0o600)
}

// Acquire returns the users of the agent named key, whose home is home:
// the slot it held before, or a free one.
func (u *Users) Acquire(key, home string) (*AgentUser, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	unlock, err := u.lockClaims()
	if err != nil {
		return nil, fmt.Errorf("hostsup: users: %w", err)
	}
	defer unlock()
	m, err := loadHeld(u.cfg.File)
	if err != nil {
		return nil, err
	}
	h, ok := m[key]
	if ok {
		if file, k, claimed := u.claimHolder(h.AgentUID); claimed && (file != u.cfg.File || k != key) && !u.claimFree(h.AgentUID) {
			ok = false // another server took it meanwhile (its claim outlived ours, as after a reboot)
		}
	}
	if !ok {
		slot, err := u.freeSlot()
		if err != nil {
			return nil, err
		}
		h = heldSlot{AgentUID: u.agentUID(slot), UID: u.workloadUID(slot), Shared: u.cfg.Shared != nil}
	}
	if err := u.claim(h.AgentUID, key); err != nil {
		return nil, err
	}
	au := &AgentUser{AgentUID: h.AgentUID, AgentGID: h.AgentUID}
	if sh := u.cfg.Shared; sh != nil {
		uid, _ := strconv.ParseUint(sh.Uid, 10, 32)
		gid, _ := strconv.ParseUint(sh.Gid, 10, 32)
		au.Name, au.UID, au.GID, au.Shared = sh.Username, uint32(uid), uint32(gid), true
		h.UID, h.Shared = au.UID, true
	} else {
		au.Name, au.UID, au.GID = workloadName(h.UID), h.UID, h.UID
		if err := ensureUser(au.Name, h.UID, home); err != nil {
			return nil, err
		}
	}
	if old, had := m[key]; !had || old != h {
		m[key] = h
		if err := u.save(m); err != nil {
			return nil, err
		}
	}
	return au, nil
}

// Release forgets key's slot, for the next agent to take; the caller has
// ended every process of its users.
func (u *Users) Release(key string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	unlock, err := u.lockClaims()
	if err != nil {
		return err
	}
	defer unlock()
	m, err := loadHeld(u.cfg.File)
	if err != nil {
		return err
	}
	h, ok := m[key]
	if !ok {
		return nil
	}
	delete(m, key)
	if err := u.save(m); err != nil {
		return err
	}
	if file, k, claimed := u.claimHolder(h.AgentUID); claimed && file == u.cfg.File && k == key {
		_ = os.Remove(u.claimPath(h.AgentUID))
	}
	return nil
}

// freeSlot is the lowest slot no server claims whose uids are unused: no
// passwd or group entry but our own, and no process running as them.
func (u *Users) freeSlot() (uint32, error) {
	busy := uidsInUse()
	for s := range u.slots() {
		a, w := u.agentUID(s), u.workloadUID(s)
		if !u.claimFree(a) || busy[a] || idTaken(a, "") {
			continue
		}
		if u.cfg.Shared == nil && (busy[w] || idTaken(w, workloadName(w))) {
			continue
		}
		return s, nil
	}
	return 0, fmt.Errorf("hostsup: no free user in %d-%d for another host agent (AGENTIC_HOST_UIDS)", u.cfg.First, u.cfg.Last)
}

// ReleaseAll frees every claim the users file holds and the file itself
// (tests', and an operator's after EndUsers).
func ReleaseAll(file string) error {
	m, err := loadHeld(file)
	if err != nil {
		return err
	}
	for _, h := range m {
		p := filepath.Join(DefaultClaimDir, strconv.FormatUint(uint64(h.AgentUID), 10))
		if data, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(data), file+"\n") {
			_ = os.Remove(p)
		}
	}
	return os.Remove(file)
}

// EndUsers ends every process of the users the users file holds (an
// operator's clean-up, and tests'); shared users are left alone but for
// the agents' own uids.
func EndUsers(file string) error {
	m, err := loadHeld(file)
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range m {
		errs = append(errs, KillUser(h.AgentUID, h.AgentUID))
		if !h.Shared {
			errs = append(errs, KillUser(h.UID, h.UID))
		}
	}
	return errors.Join(errs...)
}

// idTaken reports whether a passwd or group entry with id exists under a
// name other than ours.
func idTaken(id uint32, ours string) bool {
	s := strconv.FormatUint(uint64(id), 10)
	if pw, err := user.LookupId(s); err == nil && (ours == "" || pw.Username != ours) {
		return true
	}
	if g, err := user.LookupGroupId(s); err == nil && (ours == "" || g.Name != ours) {
		return true
	}
	return false
}

// ensureUser creates the system user name (uid = gid = id) with home, or
// points an existing one at home.
func ensureUser(name string, id uint32, home string) error {
	ids := strconv.FormatUint(uint64(id), 10)
	if _, err := user.LookupGroup(name); err != nil {
		if out, err := exec.Command("groupadd", "--system", "-g", ids, name).CombinedOutput(); err != nil {
			return fmt.Errorf("creating group %s: %v: %s", name, err, out)
		}
	}
	pw, err := user.Lookup(name)
	if err != nil {
		shell := "/bin/sh"
		if _, err := os.Stat("/bin/bash"); err == nil {
			shell = "/bin/bash"
		}
		out, err := exec.Command("useradd", "--system", "--no-create-home", "--no-log-init", "-u", ids, "-g", ids,
			"-d", home, "-s", shell, "-c", "agentic-sandbox host agent", name).CombinedOutput()
		if err != nil {
			return fmt.Errorf("creating user %s: %v: %s", name, err, out)
		}
		return nil
	}
	if pw.Uid != ids {
		return fmt.Errorf("user %s has uid %s, not %s", name, pw.Uid, ids)
	}
	if pw.HomeDir != home {
		if out, err := exec.Command("usermod", "-d", home, name).CombinedOutput(); err != nil {
			return fmt.Errorf("setting the home of %s: %v: %s", name, err, out)
		}
	}
	return nil
}

// uidsInUse are the real uids of every process now.
func uidsInUse() map[uint32]bool {
	busy := map[uint32]bool{}
	for _, pid := range allPids() {
		if uid, err := procUID32(pid); err == nil {
			busy[uid] = true
		}
	}
	return busy
}

func allPids() []int {
	entries, _ := os.ReadDir("/proc")
	pids := make([]int, 0, len(entries))
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processesOf are the pids running as uid.
func processesOf(uid uint32) []int {
	var out []int
	for _, pid := range allPids() {
		if owner, err := procUID32(pid); err == nil && owner == uid {
			if st, err := readProcStat(pid); err == nil && !st.dead() {
				out = append(out, pid)
			}
		}
	}
	return out
}

// KillUser ends every process running as uid: kill(-1, SIGKILL) sent as
// that uid, which the kernel applies to all of them at once, so not even
// a fork loop escapes; repeated until none is left.
func KillUser(uid, gid uint32) error {
	if me, _ := procUID32(os.Getpid()); uid == 0 || me == uid {
		return fmt.Errorf("hostsup: refusing to kill every process of uid %d", uid)
	}
	for range 50 {
		if len(processesOf(uid)) == 0 {
			return nil
		}
		cmd := exec.Command("/bin/sh", "-c", "kill -KILL -1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
		_ = cmd.Run() // killed too, or "no such process"
		time.Sleep(20 * time.Millisecond)
	}
	if left := processesOf(uid); len(left) > 0 {
		return fmt.Errorf("hostsup: processes of uid %d survived SIGKILL: %v", uid, left)
	}
	return nil
}

// userNS names the user namespace pid is in ("" if unknown).
func userNS(pid int) string {
	ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid))
	return ns
}

// endOrphans kills what a dead agent left behind in its user namespace
// (ns, "" for none) running as one of uids: every process but its tmux
// servers and what runs in them, the sessions that are meant to outlive it
// and that its next process adopts. Commands die with their agent: none
// finishes its side effects after the caller was told it failed. The uids
// guard against a namespace id the kernel gave anew to another agent.
func endOrphans(ns string, uids []uint32) {
	if ns == "" || len(uids) == 0 || ns == userNS(os.Getpid()) {
		return
	}
	for _, pid := range allPids() {
		uid, err := procUID32(pid)
		if err != nil || !slices.Contains(uids, uid) || userNS(pid) != ns || inTmuxServer(pid) {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// inTmuxServer reports whether pid is a tmux server or runs under one.
func inTmuxServer(pid int) bool {
	for range 64 {
		if pid <= 1 {
			return false
		}
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.HasPrefix(string(comm), "tmux: server") {
			return true
		}
		ppid, err := parentOf(pid)
		if err != nil {
			return false
		}
		pid = ppid
	}
	return false
}

func parentOf(pid int) (int, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := strings.LastIndexByte(string(data), ')')
	f := strings.Fields(string(data[i+1:]))
	if i < 0 || len(f) < 2 {
		return 0, errors.New("malformed stat")
	}
	return strconv.Atoi(f[1])
}
