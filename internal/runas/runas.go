// Package runas resolves the user an agent runs its commands (and its file
// work) as: AGENT_RUN_AS, a name, a uid, or uid:gid.
package runas

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Credential resolves runAs: a name, a uid, or uid:gid (which needs no
// passwd entry: images often have none for the user a sandbox runs as). It
// returns a nil credential when runAs is the current user, and an error when
// switching needs root.
func Credential(runAs string) (*syscall.Credential, *user.User, error) {
	stamp, stamped := accountsStamp()
	if stamped {
		if c, ok := cache.get(runAs, stamp); ok {
			return c.copy()
		}
	}
	cred, u, err := resolveCredential(runAs)
	if err == nil && stamped {
		cache.put(runAs, resolved{cred: cred, user: u, stamp: stamp})
	}
	return cred, u, err
}

// resolveCredential is Credential without the cache: it reads the account
// files. A variable for tests, which count its calls.
var resolveCredential = resolve

func resolve(runAs string) (*syscall.Credential, *user.User, error) {
	u, err := lookupRunAs(runAs)
	if err != nil {
		return nil, nil, fmt.Errorf("run as %q: %w", runAs, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, nil, fmt.Errorf("run as %q: bad uid %q", runAs, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, nil, fmt.Errorf("run as %q: bad gid %q", runAs, u.Gid)
	}
	if os.Geteuid() != 0 {
		if int(uid) == os.Geteuid() {
			return nil, u, nil
		}
		return nil, nil, fmt.Errorf("run as %q: the agent is not root", runAs)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			if g, err := strconv.ParseUint(s, 10, 32); err == nil {
				cred.Groups = append(cred.Groups, uint32(g))
			}
		}
	}
	if len(cred.Groups) == 0 {
		// The child's group list is replaced either way; keep at least the primary group.
		cred.Groups = []uint32{uint32(gid)}
	}
	return cred, u, nil
}

// homeOverride, when set, is the home of every user this process runs
// commands as (SetHome).
var homeOverride string

// SetHome makes dir the home (and starting directory) of the users this
// process runs commands as, whatever the passwd entry says: a host agent's
// commands live in the agent's own home, also when their user is shared.
func SetHome(dir string) { homeOverride = dir }

func lookupRunAs(runAs string) (*user.User, error) {
	u, err := lookupUser(runAs)
	if err == nil && homeOverride != "" {
		u.HomeDir = homeOverride
	}
	return u, err
}

func lookupUser(runAs string) (*user.User, error) {
	if uidS, gidS, ok := strings.Cut(runAs, ":"); ok {
		_, uerr := strconv.ParseUint(uidS, 10, 32)
		_, gerr := strconv.ParseUint(gidS, 10, 32)
		if uerr != nil || gerr != nil {
			return nil, errors.New("want uid:gid in numbers")
		}
		u, err := user.LookupId(uidS)
		if err != nil {
			u = &user.User{Uid: uidS, Username: uidS, HomeDir: "/tmp"}
		}
		u.Gid = gidS
		return u, nil
	}
	u, err := user.Lookup(runAs)
	if err != nil {
		if _, nerr := strconv.ParseUint(runAs, 10, 32); nerr == nil {
			u, err = user.LookupId(runAs)
		}
	}
	return u, err
}

// Dir is where a process run as u starts when nothing names a directory:
// u's home if it is a directory, else "/" (not the agent's own directory,
// which u may not enter).
func Dir(u *user.User) string {
	if fi, err := os.Stat(u.HomeDir); err == nil && fi.IsDir() {
		return u.HomeDir
	}
	return "/"
}

// Every command the agent starts resolves its user, and that meant reading
// and parsing /etc/passwd and /etc/group each time (about 7 % of the
// agent's CPU per exec of `true`). A resolution is kept while both files
// are unchanged (size, modification time, inode: an edit in place or a
// rename over them shows), so a user or group added is seen at the next
// command, as before. A missing file is not cached over.
var accountFiles = []string{"/etc/passwd", "/etc/group"}

type fileStamp struct {
	size  int64
	mtime int64 // ns
	ino   uint64
}

type accountsState [2]fileStamp

func accountsStamp() (accountsState, bool) {
	var st accountsState
	for i, path := range accountFiles {
		fi, err := os.Stat(path)
		if err != nil {
			return st, false
		}
		st[i] = fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
		if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
			st[i].ino = sys.Ino
		}
	}
	return st, true
}

type resolved struct {
	cred  *syscall.Credential
	user  *user.User
	stamp accountsState
	home  string // homeOverride when resolved
}

// copy hands out a resolution the caller may change.
func (r resolved) copy() (*syscall.Credential, *user.User, error) {
	u := *r.user
	if r.cred == nil {
		return nil, &u, nil
	}
	c := *r.cred
	c.Groups = append([]uint32(nil), r.cred.Groups...)
	return &c, &u, nil
}

// maxCachedUsers bounds the cache: an agent runs as a handful of users,
// but run_as comes from requests.
const maxCachedUsers = 64

type credCache struct {
	mu sync.Mutex
	m  map[string]resolved
}

var cache credCache

func (c *credCache) get(runAs string, stamp accountsState) (resolved, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[runAs]
	if !ok || r.stamp != stamp || r.home != homeOverride {
		return resolved{}, false
	}
	return r, true
}

func (c *credCache) put(runAs string, r resolved) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedUsers {
		c.m = map[string]resolved{}
	}
	r.home = homeOverride
	cred, u, _ := r.copy()
	r.cred, r.user = cred, u
	c.m[runAs] = r
}
