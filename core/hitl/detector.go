package hitl

import (
	"strings"
	"time"
)

// DefaultQuiet is how long a prompt must stay on screen without change.
const DefaultQuiet = 1500 * time.Millisecond

// contextBytes bounds Prompt.Context.
const contextBytes = 1024

// Prompt is a question the session waits on.
type Prompt struct {
	// Text is the prompt line; for a numbered menu, the question (when there
	// is one) and the entries, one per line.
	Text string
	// Context is up to 1 KiB of the cleaned output shown before it, whole
	// lines where possible.
	Context string
}

// Detector decides when a session waits for a human. The caller feeds output
// with Output, asks Check when NextCheck comes, and calls Answered whenever it
// writes input to the session. The zero value uses DefaultQuiet.
//
// The rules:
//
//   - What counts is what the screen shows. The bottom of the screen is the
//     last row with text, or a prompt found there (see LooksLikePrompt; a
//     numbered menu over several rows and key hints under a dialog are
//     understood too).
//   - The quiet period restarts only when output changes the bottom: its text,
//     or its row (a prompt printed again on a new line is a change). Colours,
//     cursor moves, cursor show/hide, blank lines and redraws that leave the
//     same text are not output for this purpose.
//   - Check reports a prompt once the bottom is a prompt and has not changed
//     for Quiet.
//   - A reported prompt is not reported again with the same text unless
//     Answered was called, or the screen showed no prompt for Quiet in
//     between. The reported or answered prompt with text typed after it on
//     the same row (the echo of the answer) is the same prompt.
//   - After Answered nothing fires until output changes the bottom, so a
//     prompt still on screen while the program reads the answer is not
//     reported again.
type Detector struct {
	Quiet time.Duration

	tail   Tail
	view   view      // what the bottom showed after the last Output
	cand   candidate // the prompt there, when view.prompt
	since  time.Time // when view last changed
	last   *reported // the last prompt reported or answered
	waitIO bool      // Answered was called: wait for the bottom to change
}

type view struct {
	text   string
	row    int64
	prompt bool
}

type reported struct {
	text     string
	row      int64
	answered bool
}

// NewDetector returns a Detector; quiet <= 0 means DefaultQuiet.
func NewDetector(quiet time.Duration) *Detector {
	if quiet <= 0 {
		quiet = DefaultQuiet
	}
	return &Detector{Quiet: quiet}
}

func (d *Detector) quiet() time.Duration {
	if d.Quiet <= 0 {
		return DefaultQuiet
	}
	return d.Quiet
}

// Output feeds a chunk of raw output seen at now.
func (d *Detector) Output(chunk []byte, now time.Time) {
	if len(chunk) == 0 {
		return
	}
	d.settle(now)
	d.tail.Write(chunk)
	v := d.bottom()
	if v != d.view {
		d.view, d.since, d.waitIO = v, now, false
	}
}

// bottom reads the bottom of the screen and remembers the prompt found there.
func (d *Detector) bottom() view {
	s := &d.tail.s
	last := -1
	for i := len(s.rows) - 1; i >= 0; i-- {
		if len(trimBlank(s.rows[i])) > 0 {
			last = i
			break
		}
	}
	if last < 0 {
		return view{row: s.flushed}
	}
	if c, ok := detect(s.rows); ok {
		d.cand = c
		return view{text: c.text, row: s.absRow(last), prompt: true}
	}
	d.cand = candidate{}
	return view{text: string(trimBlank(s.rows[last])), row: s.absRow(last)}
}

// settle forgets the reported prompt once no prompt has been shown for Quiet:
// the same question asked later is a new one.
func (d *Detector) settle(now time.Time) {
	if d.last != nil && !d.view.prompt && now.Sub(d.since) >= d.quiet() {
		d.last = nil
	}
}

// pending reports whether the prompt on screen may still be reported.
func (d *Detector) pending() bool {
	if !d.view.prompt || d.waitIO {
		return false
	}
	l := d.last
	if l == nil {
		return true
	}
	row := d.tail.s.absRow(d.cand.last)
	if row == l.row && len(d.cand.text) > len(l.text) && strings.HasPrefix(d.cand.text, l.text) {
		return false // the answer being typed after the reported prompt
	}
	return l.answered || d.cand.text != l.text
}

// Check returns the prompt the session waits on, if the bottom of the screen
// is a prompt that has not changed for Quiet and was not reported yet.
func (d *Detector) Check(now time.Time) (prompt Prompt, ok bool) {
	d.settle(now)
	if !d.pending() || now.Sub(d.since) < d.quiet() {
		return Prompt{}, false
	}
	d.last = &reported{text: d.cand.text, row: d.tail.s.absRow(d.cand.last)}
	return Prompt{Text: d.cand.text, Context: d.tail.s.context(d.cand.first, contextBytes)}, true
}

// NextCheck returns when Check could report the prompt now on screen, or the
// zero time if there is none to report. Output can change it.
func (d *Detector) NextCheck() time.Time {
	if !d.pending() {
		return time.Time{}
	}
	return d.since.Add(d.quiet())
}

// Answered tells the detector that input was written to the session. Call it
// for every write to stdin, the answer to a HITL request or keys a person
// typed in the terminal, so that their echo is not taken for a new prompt.
// The prompt answered may then be reported again if it comes back.
func (d *Detector) Answered() {
	switch {
	case d.view.prompt:
		// Possibly answered before it was reported: its echo is not new either.
		d.last = &reported{text: d.cand.text, row: d.tail.s.absRow(d.cand.last)}
	case d.last == nil:
		d.waitIO = true
		return
	}
	d.last.answered = true
	d.waitIO = true
}
