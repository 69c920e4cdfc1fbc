package testreq

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a T that records how the rule stopped it.
type recorder struct{ skipped, failed string }

func (r *recorder) Helper()                           {}
func (r *recorder) Skipf(format string, args ...any)  { r.skipped = fmt.Sprintf(format, args...) }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestNeedSkipsOutsideCIAndFailsInCI(t *testing.T) {
	for _, tc := range []struct {
		ci         string
		ok         bool
		skip, fail bool
	}{
		{"", false, true, false},
		{"false", false, true, false},
		{"true", false, false, true},
		{"1", false, false, true},
		{"true", true, false, false},
		{"", true, false, false},
	} {
		t.Setenv("CI", tc.ci)
		var r recorder
		Need(&r, tc.ok, "dockerd", "run make test-env")
		if (r.skipped != "") != tc.skip || (r.failed != "") != tc.fail {
			t.Errorf("CI=%q ok=%v: skipped %q failed %q", tc.ci, tc.ok, r.skipped, r.failed)
		}
		for _, msg := range []string{r.skipped, r.failed} {
			if msg != "" && (!strings.Contains(msg, "dockerd") || !strings.Contains(msg, "make test-env")) {
				t.Errorf("message %q does not say what is missing and how to get it", msg)
			}
		}
	}
}

func TestCommandAndFile(t *testing.T) {
	t.Setenv("CI", "")
	var r recorder
	Command(&r, "sh", "apt-get install dash")
	File(&r, "/", "the root directory", "")
	if r.skipped != "" || r.failed != "" {
		t.Fatalf("present requirements stopped the test: %+v", r)
	}
	Command(&r, "no-such-program-here", "apt-get install it")
	if !strings.Contains(r.skipped, "no-such-program-here") {
		t.Fatalf("missing program: %+v", r)
	}
}
