package runas

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestCredentialIsResolvedAgainOnlyWhenTheAccountsChange: a second lookup
// of the same user is served without reading the account files, and any
// change to either file (an edit, a rename over it) is seen at once.
func TestCredentialIsResolvedAgainOnlyWhenTheAccountsChange(t *testing.T) {
	dir := t.TempDir()
	passwd, group := filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	for _, p := range []string{passwd, group} {
		if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, real := accountFiles, resolveCredential
	t.Cleanup(func() { accountFiles, resolveCredential = files, real; cache = credCache{} })
	accountFiles = []string{passwd, group}
	cache = credCache{}
	calls := 0
	resolveCredential = func(runAs string) (*syscall.Credential, *user.User, error) {
		calls++
		return real(runAs)
	}
	runAs := fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	want := func(n int, what string) {
		t.Helper()
		cred, u, err := Credential(runAs)
		if err != nil || u == nil {
			t.Fatalf("%s: %v", what, err)
		}
		if calls != n {
			t.Fatalf("%s: resolved %d times, want %d", what, calls, n)
		}
		// What the caller gets is its own to change.
		u.HomeDir = "/changed"
		if cred != nil {
			cred.Groups = append(cred.Groups[:0], 4242)
		}
	}
	want(1, "first lookup")
	want(1, "same files")
	if c, u, _ := Credential(runAs); u.HomeDir == "/changed" || c != nil && len(c.Groups) > 0 && c.Groups[0] == 4242 {
		t.Fatal("a caller's change reached the cache")
	}

	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(group, later, later); err != nil {
		t.Fatal(err)
	}
	want(2, "group touched")
	if err := os.WriteFile(passwd, []byte("xy\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want(3, "passwd grown")
	repl := filepath.Join(dir, "passwd.new")
	if err := os.WriteFile(repl, []byte("xy\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(passwd)
	if err := os.Chtimes(repl, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(repl, passwd); err != nil {
		t.Fatal(err)
	}
	want(4, "passwd renamed over (same size and time, another inode)")
	if err := os.Remove(group); err != nil {
		t.Fatal(err)
	}
	want(5, "group gone")
	want(6, "group still gone: nothing cached")
}
