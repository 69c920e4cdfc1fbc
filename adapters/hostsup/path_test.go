package hostsup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A host agent run as a user of its own gets the server's PATH without
// what that user cannot search (root's /root/go/bin, say): in order,
// without repeats or relative entries, through symbolic links checked
// both ways; the default PATH when nothing is left.
func TestUsablePathKeepsWhatTheUserCanSearch(t *testing.T) {
	t.Parallel()
	base, err := os.MkdirTemp("", "hostsup-path-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil { //nolint:gosec // others must search it
		t.Fatal(err)
	}
	dir := func(rel string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(p, 0o755); err != nil { //nolint:gosec // test dirs
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	lockedBin := dir("locked/bin", 0o755) // under a 0700 directory
	dir("locked", 0o700)
	openBin := dir("open/bin", 0o755)
	groupBin := dir("group/bin", 0o710) // ours: searchable by our group only
	noSearch := dir("nosearch", 0o644)
	link := filepath.Join(base, "link")
	if err := os.Symlink(lockedBin, link); err != nil { // a way in that leads to the locked one
		t.Fatal(err)
	}
	const other = 65534
	gid := uint32(os.Getgid()) //nolint:gosec // a gid
	if gid == other {
		t.Fatal("the test's group is the one it takes as somebody else's")
	}
	server := strings.Join([]string{lockedBin, "relative/bin", openBin, "", link, noSearch, groupBin, openBin, filepath.Join(base, "missing")}, ":")

	if got := usablePath(server, other, other); got != openBin {
		t.Errorf("another user and group: %q, want %q", got, openBin)
	}
	if got, want := usablePath(server, other, gid), openBin+":"+groupBin; got != want {
		t.Errorf("another user in our group: %q, want %q", got, want)
	}
	if got, want := usablePath(server, 0, 0), strings.Join([]string{lockedBin, openBin, link, noSearch, groupBin}, ":"); got != want {
		// Root may search any directory.
		t.Errorf("root: %q, want %q", got, want)
	}
	if got := usablePath(lockedBin+":"+link, other, other); got != DefaultPath {
		t.Errorf("nothing usable: %q, want the default %q", got, DefaultPath)
	}
	if got := usablePath("", other, other); got != DefaultPath {
		t.Errorf("no PATH: %q, want the default %q", got, DefaultPath)
	}
}
