package aiwg

import (
	"errors"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://h:7337", "http://h:7337"},
		{"ws://h/ws/executors/x?token=s3cret", "ws://h/ws/executors/x?token=REDACTED"},
		{"wss://h/ws?a=1&token=s3cret&token=two", "wss://h/ws?a=REDACTED&token=REDACTED&token=REDACTED"},
		{"https://user:s3cret@h/base", "https://REDACTED@h/base"},
		{"https://s3cret@h/base#s3cret", "https://REDACTED@h/base"},
		{"http://h/%zz?token=s3cret", "http://h/%zz?token=REDACTED"},
		{"::not a url token=s3cret", "::not a url token=REDACTED"},
	} {
		if got := redactURL(tc.in); got != tc.want {
			t.Errorf("redactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestRedactText(t *testing.T) {
	for _, in := range []string{
		`Get "ws://h/ws/executors/x?token=s3cret": EOF`,
		`Authorization: Bearer s3cret`,
		`dial https://me:s3cret@h failed`,
		`access_token=s3cret&x=1`,
	} {
		if got := redactText(in); strings.Contains(got, "s3cret") || !strings.Contains(got, redacted) {
			t.Errorf("redactText(%q) = %q", in, got)
		}
	}
	if got := redactText("nothing to hide"); got != "nothing to hide" {
		t.Errorf("changed clean text: %q", got)
	}
}

func TestScrubKnownTokens(t *testing.T) {
	c := New(Config{Endpoint: "http://h"})
	c.mu.Lock()
	c.rememberTokenLocked("abc123tok")
	c.mu.Unlock()
	if got := c.errText(errors.New("server said abc123tok")); strings.Contains(got, "abc123tok") {
		t.Errorf("token survived: %q", got)
	}
}
