package main

import (
	"strings"
	"testing"
)

// shell's mistakes are explained before anything is asked of the server.
func TestShellUsage(t *testing.T) {
	env := envOf("AGENTIC_SERVER", "http://127.0.0.1:2", "AGENTIC_OPERATOR_TOKEN", token)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"shell"}, "shell needs an agent or environment"},
		{[]string{"shell", "--"}, "shell needs an agent or environment"},
		{[]string{"shell", "host-01", "--", ""}, "the command after -- is empty"},
		{[]string{"shell", "--cwd", "/tmp", "host-01"}, "--cwd and --env apply to a command"},
		{[]string{"shell", "--env", "A=1", "host-01"}, "--cwd and --env apply to a command"},
		{[]string{"shell", "--env", "A", "host-01", "--", "sh"}, "KEY=VALUE"},
		{[]string{"shell", "--detach-key", "alt-x", "host-01"}, "want ctrl-<char>"},
	} {
		r := runWith(t, env, "", c.args...)
		if r.code != exitError || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want 1 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	r := runWith(t, env, "", "shell", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "Ctrl-]") || !strings.Contains(r.stdout, "agenticctl attach SESSION") {
		t.Fatalf("help: %d %q", r.code, r.stdout)
	}
	// Nobody answers there: said so, exit 1.
	r = runWith(t, env, "", "shell", "host-01")
	if r.code != exitError || !strings.Contains(r.stderr, "WebSocket ws://127.0.0.1:1/ws") {
		t.Fatalf("no server: %d %q", r.code, r.stderr)
	}
}

func TestDetachName(t *testing.T) {
	for in, want := range map[string]string{"ctrl-]": "Ctrl-]", "CTRL-q": "Ctrl-Q", "none": "no key", "": "no key"} {
		if got := detachName(in); got != want {
			t.Errorf("detachName(%q) = %q, want %q", in, got, want)
		}
	}
}
