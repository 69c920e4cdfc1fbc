package hitl

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// step is one thing done to a Detector in a script.
type step struct {
	at       int    // milliseconds after t0
	out      string // Output this chunk
	answered bool   // call Answered
	check    bool   // call Check and compare with want
	want     string // prompt text expected from Check, "" for none
	next     int    // with check: expected NextCheck after it, ms after t0; -1 for zero
}

func TestDetector(t *testing.T) {
	const prompt = "Proceed? [y/N] "
	tests := []struct {
		name  string
		steps []step
	}{
		{"fires once after quiet, not before", []step{
			{at: 0, out: "installing\r\n" + prompt},
			{at: 1499, check: true, next: 1500},
			{at: 1500, check: true, want: "Proceed? [y/N]", next: -1},
			{at: 1501, check: true, next: -1},
			{at: 60000, check: true, next: -1},
		}},
		{"new output before quiet cancels", []step{
			{at: 0, out: prompt},
			{at: 1000, out: "\r\nnot a question\r\n"},
			{at: 5000, check: true, next: -1},
		}},
		{"a new prompt restarts the wait", []step{
			{at: 0, out: "Continue?"},
			{at: 1000, out: "\r\nReally? [y/N] "},
			{at: 1500, check: true, next: 2500},
			{at: 2500, check: true, want: "Really? [y/N]", next: -1},
		}},
		{"prompt printed in pieces", []step{
			{at: 0, out: "Proc"},
			{at: 100, check: true, next: -1},
			{at: 500, out: "eed? [y"},
			{at: 1000, out: "/N"},
			{at: 1200, out: "] "},
			{at: 2000, check: true, next: 2700},
			{at: 2700, check: true, want: "Proceed? [y/N]", next: -1},
		}},
		{"cursor blinks, colours, blank lines and redraws are not output", []step{
			{at: 0, out: "Continue?"},
			{at: 500, out: "\x1b[?25l"},
			{at: 700, out: "\x1b[?25h\x1b[0m"},
			{at: 900, out: "\r\x1b[2KContinue?"},
			{at: 1100, out: "\r\n\r\n"},
			{at: 1200, out: "\x1b]0;title\x07"},
			{at: 1500, check: true, want: "Continue?", next: -1},
		}},
		{"non-prompt last line never fires", []step{
			{at: 0, out: "Do you want to proceed? [y/N]\r\nDownloading…\r\n"},
			{at: 1500, check: true, next: -1},
			{at: 3_600_000, check: true, next: -1},
		}},
		{"nothing written", []step{
			{at: 0, check: true, next: -1},
			{at: 10, out: ""},
			{at: 5000, check: true, next: -1},
		}},
		{"answered then a new prompt fires", []step{
			{at: 0, out: prompt},
			{at: 1500, check: true, want: "Proceed? [y/N]", next: -1},
			{at: 2000, answered: true},
			{at: 2010, out: "y\r\nworking\r\nOverwrite config.yaml? [y/N] "},
			{at: 3509, check: true, next: 3510},
			{at: 3510, check: true, want: "Overwrite config.yaml? [y/N]", next: -1},
		}},
		{"answered then the same prompt again fires", []step{
			{at: 0, out: "[sudo] password for bob: "},
			{at: 1500, check: true, want: "[sudo] password for bob:"},
			{at: 2000, answered: true},
			{at: 2100, out: "\r\nSorry, try again.\r\n[sudo] password for bob: "},
			{at: 3600, check: true, want: "[sudo] password for bob:", next: -1},
		}},
		{"after Answered nothing fires until the screen changes", []step{
			{at: 0, out: prompt},
			{at: 1500, check: true, want: "Proceed? [y/N]"},
			{at: 2000, answered: true},
			{at: 9000, check: true, next: -1},
			{at: 9100, out: "\x1b[?25l"},
			{at: 12000, check: true, next: -1},
		}},
		{"input before the prompt fired cancels it", []step{
			{at: 0, out: prompt},
			{at: 1000, answered: true},
			{at: 5000, check: true, next: -1},
			{at: 5100, out: "n\r\nAborted.\r\n"},
			{at: 9000, check: true, next: -1},
		}},
		{"the echo of an answer typed before the prompt fired is not a prompt", []step{
			{at: 0, out: "Ok to proceed? (y) "},
			{at: 1000, answered: true},
			{at: 1100, out: "y"},
			{at: 9000, check: true, next: -1},
			{at: 9100, out: "\r\n"},
			{at: 19000, check: true, next: -1},
		}},
		{"answered while no prompt shows", []step{
			{at: 0, out: "Continue?"},
			{at: 1500, check: true, want: "Continue?"},
			{at: 1600, out: "\r\nworking"},
			{at: 1700, answered: true},
			{at: 1800, out: "\r\nContinue?"},
			{at: 3300, check: true, want: "Continue?", next: -1},
		}},
		{"answered with nothing on screen", []step{
			{at: 0, answered: true},
			{at: 100, out: "Continue?"},
			{at: 1600, check: true, want: "Continue?", next: -1},
		}},
		{"the echoed answer is not a new prompt", []step{
			{at: 0, out: prompt},
			{at: 1500, check: true, want: "Proceed? [y/N]"},
			{at: 4000, out: "y"},
			{at: 9000, check: true, next: -1},
			{at: 9100, answered: true},
			{at: 9200, out: "es"},
			{at: 19000, check: true, next: -1},
		}},
		{"same prompt again without an answer is not reported twice", []step{
			{at: 0, out: "Password: "},
			{at: 1500, check: true, want: "Password:"},
			{at: 3000, out: "\r\nPassword: "},
			{at: 9000, check: true, next: -1},
		}},
		{"same prompt after a quiet stretch without one is new", []step{
			{at: 0, out: "Continue?"},
			{at: 1500, check: true, want: "Continue?"},
			{at: 2000, out: "\r\nrunning step 2\r\n"},
			{at: 3500, check: true, next: -1},
			{at: 4000, out: "Continue?"},
			{at: 5500, check: true, want: "Continue?"},
		}},
		{"a prompt gone for less than quiet does not re-arm", []step{
			{at: 0, out: "Continue?"},
			{at: 1500, check: true, want: "Continue?"},
			{at: 2000, out: "\r\nretrying\r\n"},
			{at: 2100, out: "Continue?"},
			{at: 9000, check: true, next: -1},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDetector(0)
			run(t, d, tc.steps)
		})
	}
}

func run(t *testing.T, d *Detector, steps []step) {
	t.Helper()
	for i, s := range steps {
		now := ms(s.at)
		if s.out != "" || (!s.check && !s.answered) {
			d.Output([]byte(s.out), now)
		}
		if s.answered {
			d.Answered()
		}
		if !s.check {
			continue
		}
		p, ok := d.Check(now)
		if got := map[bool]string{true: p.Text}[ok]; got != s.want || ok != (s.want != "") {
			t.Fatalf("step %d at %dms: Check = %q, %v; want %q", i, s.at, p.Text, ok, s.want)
		}
		if s.want != "" && s.next == 0 {
			continue
		}
		want := time.Time{}
		if s.next >= 0 {
			want = ms(s.next)
		}
		if got := d.NextCheck(); !got.Equal(want) {
			t.Fatalf("step %d at %dms: NextCheck = %v, want %v", i, s.at, got, want)
		}
	}
}

func TestDetectorQuiet(t *testing.T) {
	var zero Detector // the zero value waits DefaultQuiet
	zero.Output([]byte("Continue?"), t0)
	if got := zero.NextCheck(); !got.Equal(t0.Add(DefaultQuiet)) {
		t.Fatalf("zero Detector NextCheck = %v", got)
	}
	d := NewDetector(200 * time.Millisecond)
	if d.Quiet != 200*time.Millisecond {
		t.Fatalf("Quiet = %v", d.Quiet)
	}
	run(t, d, []step{
		{at: 0, out: "Continue?"},
		{at: 199, check: true, next: 200},
		{at: 200, check: true, want: "Continue?", next: -1},
	})
	if NewDetector(-1).Quiet != DefaultQuiet {
		t.Fatal("negative quiet not defaulted")
	}
}

// A Claude Code permission dialog drawn the way Ink draws: the frame is
// erased line by line and written again on every render.
func TestDetectorClaudeDialog(t *testing.T) {
	frame := func(sel int) string {
		opts := []string{"1. Yes", "2. Yes, and don't ask again for npm commands", "3. No, and tell Claude what to do differently (esc)"}
		var b strings.Builder
		b.WriteString("\x1b[1mBash command\x1b[22m\r\n\r\n  npm install\r\n  Install dependencies\r\n\r\n")
		b.WriteString("Do you want to proceed?\r\n")
		for i, o := range opts {
			mark := "  "
			if i+1 == sel {
				mark = "\x1b[36m❯\x1b[39m "
			}
			b.WriteString(mark + o + "\r\n")
		}
		return b.String()
	}
	const frameRows = 9
	erase := strings.Repeat("\x1b[2K\x1b[1A", frameRows) + "\x1b[2K\x1b[G"
	var history strings.Builder
	for i := range 40 {
		fmt.Fprintf(&history, "⏺ step %d done\r\n", i)
	}
	want := "Do you want to proceed?\n❯ 1. Yes\n2. Yes, and don't ask again for npm commands\n3. No, and tell Claude what to do differently (esc)"

	d := NewDetector(0)
	d.Output([]byte(history.String()), ms(0))
	d.Output([]byte("\x1b[?25l✻ Thinking…\r\n"), ms(100))
	d.Output([]byte("\x1b[2K\x1b[1A\x1b[2K\x1b[G"+frame(1)), ms(200))
	// A redraw of the same frame is not output.
	d.Output([]byte(erase+frame(1)), ms(1000))
	if got := d.NextCheck(); !got.Equal(ms(1700)) {
		t.Fatalf("NextCheck = %v", got)
	}
	// A redraw split in the middle shows something else for a moment.
	redraw := erase + frame(1)
	d.Output([]byte(redraw[:len(redraw)/2]), ms(1200))
	d.Output([]byte(redraw[len(redraw)/2:]), ms(1201))
	if _, ok := d.Check(ms(1700)); ok {
		t.Fatal("reported while the screen was being redrawn")
	}
	p, ok := d.Check(ms(2701))
	if !ok || p.Text != want {
		t.Fatalf("Check = %q, %v; want %q", p.Text, ok, want)
	}
	if !strings.HasSuffix(p.Context, "Bash command\n\n  npm install\n  Install dependencies") ||
		strings.Contains(p.Context, "Do you want") || strings.Contains(p.Context, "Thinking") || len(p.Context) > contextBytes {
		t.Fatalf("Context = %q", p.Context)
	}
	// Later identical redraws, whole or split, do not report it again.
	d.Output([]byte(erase+frame(1)), ms(5000))
	d.Output([]byte(redraw[:100]), ms(6000))
	d.Output([]byte(redraw[100:]), ms(6001))
	if p, ok := d.Check(ms(20000)); ok {
		t.Fatalf("redraw reported again: %q", p.Text)
	}
	// Moving the selection changes the prompt: a human is still needed, and
	// it is a different screen.
	d.Output([]byte(erase+frame(2)), ms(21000))
	if p, ok := d.Check(ms(22500)); !ok || !strings.Contains(p.Text, "❯ 2. Yes, and") {
		t.Fatalf("after selection moved: %q, %v", p.Text, ok)
	}
	// Answered: the dialog goes away and work goes on; nothing is reported.
	d.Answered()
	d.Output([]byte(erase+"⏺ Bash(npm install)\r\n  ⎿ added 120 packages\r\n"), ms(23000))
	if p, ok := d.Check(ms(30000)); ok {
		t.Fatalf("after the answer: %q", p.Text)
	}
}

func TestDetectorContext(t *testing.T) {
	d := NewDetector(0)
	for i := range 300 {
		d.Output(fmt.Appendf(nil, "\x1b[2mlog line %03d\x1b[0m\r\n", i), ms(i))
	}
	d.Output([]byte("Apply these changes? "), ms(400))
	p, ok := d.Check(ms(2000))
	if !ok || p.Text != "Apply these changes?" {
		t.Fatalf("Check = %q, %v", p.Text, ok)
	}
	if len(p.Context) > contextBytes || !strings.HasPrefix(p.Context, "log line ") || !strings.HasSuffix(p.Context, "log line 299") {
		t.Fatalf("Context (%d bytes) = %q", len(p.Context), p.Context)
	}
	if strings.Count(p.Context, "\n") < 60 {
		t.Fatalf("Context has too few lines: %q", p.Context)
	}

	// A prompt as the very first output has no context.
	d = NewDetector(0)
	d.Output([]byte("Password: "), t0)
	if p, ok := d.Check(ms(1500)); !ok || p.Context != "" {
		t.Fatalf("first-line prompt: %+v, %v", p, ok)
	}
}
