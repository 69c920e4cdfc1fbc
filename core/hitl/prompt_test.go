package hitl

import (
	"strings"
	"testing"
)

func TestLooksLikePrompt(t *testing.T) {
	tests := []struct {
		line string
		want bool
	}{
		// Yes/no choices.
		{"Proceed? [y/N] ", true},
		{"Do you want to continue? [Y/n]", true},
		{"Overwrite existing file [y/n]", true},
		{"Delete branch (y/n)", true},
		{"Do you accept the license terms? (yes/no)", true},
		{"Reset the database [yes/no]", true},
		{"Are you sure you want to continue connecting (yes/no/[fingerprint])?", true},
		{"Proceed ([y]/n)? ", true},
		{"Is this ok [y/N]: ", true},
		{"Replace file? (y)es/(n)o", true},
		{"Ok to proceed? (y) ", true},
		{"WARNING: this deletes everything. Continue [y/N]", true},
		// Phrases.
		{"Do you want to proceed", true},
		{"Do you want to continue", true},
		{"Would you like to install the recommended extensions", true},
		{"Are you sure", true},
		{"Press ENTER to continue", true},
		{"Press Enter to open the browser", true},
		{"press any key to continue . . .", true},
		{"Hit enter when done", true},
		{"Continue?", true},
		{"Continue? (default yes)", true},
		{"Overwrite? that file is newer", true},
		// Secrets and input requests.
		{"Password:", true},
		{"[sudo] password for bob: ", true},
		{"bob@host's password: ", true},
		{"Enter passphrase for key '/home/bob/.ssh/id_ed25519': ", true},
		{"Enter PEM pass phrase:", true},
		{"Username for 'https://github.com': ", true},
		{"Enter your name: ", true},
		{"Enter a project name (my-app): ", true},
		{"Please select an option [1-3]:", true},
		{"package name: (my-app)", true},
		{"? Project name: › vite-project", true},
		// Questions.
		{"What should the new file be called?", true},
		{"Which database do you use? ", true},
		{"Name? (bob)", true},
		{"Is http://localhost:8080 the right endpoint?", true},
		{"\x1b[1;32mProceed?\x1b[0m \x1b[2m[Y/n]\x1b[0m ", true},
		{"Downloading…\r\nContinue?", true},
		{"│ Do you trust the files in this folder?  │", true},
		// Claude Code-style menus.
		{"❯ 1. Yes", true},
		{"> 2. No, and tell Claude what to do differently", true},
		{"1. Yes  2. No", true},
		{"1) Allow 2) Deny", true},

		// Ordinary output.
		{"", false},
		{"   ", false},
		{"Downloading…", false},
		{"Downloading https://example.com/pkg.tar.gz?token=abc", false},
		{"Done.", false},
		{"error: x", false},
		{"http://x/?a=b", false},
		{"see https://example.com/search?q=what", false},
		{"GET /api/v1/items?limit=10 200", false},
		{"?", false},
		{"???", false},
		{"--?--", false},
		{"...", false},
		{"{\"type\":\"assistant\",\"message\":{\"content\":\"Continue?\"}}", false},
		{"[\"Proceed? [y/N]\"]", false},
		{strings.Repeat("word ", 101) + "?", false},
		{"INFO: should we retry?", false},
		{"[error] are you sure the path exists?", false},
		{"2026-01-02 10:00:00 cache miss?", false},
		{"12:00:01 do you want to see logs?", false},
		{"Password updated successfully.", false},
		{"password: ********", false},
		{"Selected files: a.go, b.go", false},
		{"1. Install dependencies", false},
		{"2. Run the tests", false},
		{"✔ Project name: … vite-project", false},
		{"? for shortcuts", false},
		{"Compiling foo v0.1.0 (/work/foo)", false},
		{"╰──────────────────────────╯", false},
		{"Press h + enter to show help", false},
		{"  ➜  Local:   http://localhost:5173/", false},
		{"test result: ok. 12 passed; 0 failed", false},
		{"Using token:", false},
	}
	for _, tc := range tests {
		if got := LooksLikePrompt(tc.line); got != tc.want {
			t.Errorf("LooksLikePrompt(%q) = %v, want %v", tc.line, got, tc.want)
		}
	}
}

func TestDetect(t *testing.T) {
	tests := []struct {
		name   string
		screen string
		want   string // "" means no prompt
	}{
		{"plain prompt", "building\r\nProceed? [y/N] ", "Proceed? [y/N]"},
		{"prompt then newline", "Continue?\r\n", "Continue?"},
		{"log line last", "Continue?\r\nok\r\n", ""},
		{"empty", "", ""},
		{
			"claude permission dialog",
			"╭──────────────────────────────╮\r\n" +
				"│ Bash command                 │\r\n" +
				"│                              │\r\n" +
				"│   npm install                │\r\n" +
				"│                              │\r\n" +
				"│ Do you want to proceed?      │\r\n" +
				"│ ❯ 1. Yes                     │\r\n" +
				"│   2. Yes, and don't ask again│\r\n" +
				"│      for npm commands        │\r\n" +
				"│   3. No, and tell Claude what│\r\n" +
				"│      to do differently (esc) │\r\n" +
				"╰──────────────────────────────╯\r\n",
			"Do you want to proceed?\n❯ 1. Yes\n2. Yes, and don't ask again\nfor npm commands\n3. No, and tell Claude what\nto do differently (esc)",
		},
		{
			"trust dialog with key hints",
			" Do you trust the files in this folder?\r\n\r\n ❯ 1. Yes, proceed\r\n   2. No, exit\r\n\r\n Enter to confirm · Esc to exit\r\n",
			"Do you trust the files in this folder?\n❯ 1. Yes, proceed\n2. No, exit",
		},
		{"menu after question, no marker", "Pick a template:\r\n1. react\r\n2. vue\r\n", "Pick a template:\n1. react\n2. vue"},
		{"numbered list in a log", "Plan:\r\nsteps follow\r\n1. build\r\n2. test\r\n", ""},
		{"numbers not from 1", "❯ 2. b\r\n3. c\r\n", ""},
		{"hint under a question", "Are you sure?\r\nEsc to cancel\r\n", "Are you sure?"},
		{"hint alone", "Esc to cancel\r\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s screen
			s.write([]byte(tc.screen))
			c, ok := detect(s.rows)
			if got := map[bool]string{true: c.text}[ok]; got != tc.want {
				t.Fatalf("detect = %q (ok %v), want %q", c.text, ok, tc.want)
			}
		})
	}
}
