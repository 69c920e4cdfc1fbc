package hitl

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxPromptRunes: a longer line is output, not a question.
const maxPromptRunes = 500

// Strong signs: a program asks this way and logs hardly ever look like it.
var (
	// [y/N] (Y/n) [yes/no] (yes/no/[fingerprint]) ([y]/n) [n/y]
	reYesNo  = regexp.MustCompile(`(?i)[\[(]\s*\[?(?:y(?:es)?\]?\s*/\s*\[?no?|no?\]?\s*/\s*\[?y(?:es)?)\]?\s*(?:/[^\])]*)?[\])]`)
	reYesNo2 = regexp.MustCompile(`(?i)\(y\)es\s*/\s*\(n\)o`)
	// A secret or an account name asked for: "[sudo] password for bob:",
	// "Enter passphrase for key '…':", "Username for 'https://…':".
	reSecret = regexp.MustCompile(`(?i)\b(?:password|passphrase|pass phrase|passcode|otp|one[- ]time (?:code|password)|verification code|2fa code|username|user name)\b.{0,120}:\s*$`)
	// A selected entry of a numbered menu: "❯ 1. Yes".
	reSelected = regexp.MustCompile(`^[❯›>➤▶▸→]\s*\d{1,2}[.)]\s+\S`)
	// A menu on one line: "1. Yes  2. No".
	reInlineMenu = regexp.MustCompile(`^(?:[❯›>➤▶▸→]\s*)?1[.)]\s+\S.*?\s2[.)]\s+\S`)
)

// Weak signs: a question or an input request, unless the line is a log record.
var (
	rePhrase = regexp.MustCompile(`(?i)\b(?:do you (?:want|wish) to|would you like to|are you sure|(?:press|hit) (?:<|\[)?(?:enter|return)\b|(?:press|hit) any key|\(use arrow keys\)|ok to proceed)`)
	// "Continue?" "Overwrite?" even with something after them.
	reVerbQ = regexp.MustCompile(`(?i)\b(?:continue|proceed|overwrite|replace|retry|confirm|abort)\s*\?`)
	// A question, maybe followed by a short default: "Name? (bob)", "Proceed? [Y]".
	reEndQ = regexp.MustCompile(`\?\s*(?:[\[(][^\])]{0,24}[\])])?\s*:?$`)
	// An input request ending in a colon: "Enter a name (app):", "Select an option [1-3]:".
	reEnter = regexp.MustCompile(`(?i)\b(?:enter|type|input|provide|choose|select|pick|specify)\b.{0,200}:\s*(?:[\[(][^\])]{0,24}[\])])?\s*$`)
	// "package name: (app)": a label with a default, as npm init asks.
	reDefault = regexp.MustCompile(`^[A-Za-z][\w .'/-]{0,40}:\s*\([^)]{0,40}\)$`)
	// Log records: "INFO …", "[error] …", "2024-01-02 10:00:00 …", "10:00:00 …".
	reLogPrefix = regexp.MustCompile(`(?i)^(?:\W{0,3}(?:trace|debug|info|notice|warn|warning|error|err|fatal|panic|critical)\b[\]:)\s]|\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}|\[?\d{2}:\d{2}:\d{2}\b)`)
	reURL       = regexp.MustCompile(`(?i)\b(?:[a-z][a-z0-9+.-]*://|www\.)[^\s'"<>]*`)
)

// LooksLikePrompt reports whether line asks a human something. Escape
// sequences are stripped and, given several lines, the last one with text
// counts; box-drawing borders around it are ignored.
//
// It says yes to: yes/no choices ([y/N], (yes/no), …), a password or
// passphrase asked for, a selected or one-line numbered menu ("❯ 1. Yes",
// "1. Yes  2. No"), and, unless the line starts like a log record ("INFO",
// "error:", a timestamp), to "Do you want to…", "Are you sure", "Press
// ENTER"/"press any key", "Continue?", an "Enter …:" style input request, and
// a line ending in "?" (a short default after it allowed).
//
// It says no to lines longer than 500 runes, JSON, lines without letters or
// digits, and a "?" that belongs to a URL.
func LooksLikePrompt(line string) bool {
	if strings.ContainsFunc(line, isControl) {
		line = string(StripANSI([]byte(line)))
	}
	if i := strings.LastIndexByte(strings.TrimRight(line, " \t\n"), '\n'); i >= 0 {
		line = line[i+1:]
	}
	return looksLikePrompt(normalize(line))
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// looksLikePrompt judges one line already cleaned by normalize.
func looksLikePrompt(s string) bool {
	if s == "" || utf8.RuneCountInString(s) > maxPromptRunes {
		return false
	}
	if s[0] == '{' || strings.HasPrefix(s, `["`) || strings.HasPrefix(s, "[{") {
		return false // JSON, e.g. a stream-json event
	}
	if !strings.ContainsFunc(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) {
		return false
	}
	if reYesNo.MatchString(s) || reYesNo2.MatchString(s) || reSecret.MatchString(s) ||
		reSelected.MatchString(s) || reInlineMenu.MatchString(s) {
		return true
	}
	// A "?" inside a URL is a query string, not a question.
	s = strings.TrimSpace(reURL.ReplaceAllString(s, ""))
	if s == "" {
		return false
	}
	if reLogPrefix.MatchString(s) {
		return false
	}
	if rePhrase.MatchString(s) || reVerbQ.MatchString(s) || reDefault.MatchString(s) || reEnter.MatchString(s) {
		return true
	}
	if reEndQ.MatchString(s) {
		// The question needs a word: "1 ?" or ">> ?" is not one.
		return strings.ContainsFunc(s[:strings.LastIndexByte(s, '?')], unicode.IsLetter)
	}
	// Inquirer-style: "? Project name: › app".
	return strings.HasPrefix(s, "? ") && strings.Contains(s, "›")
}

// normalize trims blanks and box-drawing borders: "│ ❯ 1. Yes   │" is "❯ 1. Yes".
func normalize(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || isBoxDrawing(r)
	})
}

// isBoxDrawing covers box drawing and block elements (U+2500–U+259F), used for
// dialog borders and progress bars.
func isBoxDrawing(r rune) bool { return r >= 0x2500 && r <= 0x259f }

// footerHint matches the key hints under a dialog ("Esc to cancel · Enter to
// confirm"), which are not the question.
func footerHint(s string) bool {
	if utf8.RuneCountInString(s) > 160 || looksLikePrompt(s) {
		return false
	}
	l := strings.ToLower(s)
	for _, k := range []string{"esc to ", "enter to ", "tab to ", "ctrl+", "↑", "↓", "to navigate", "to select", "to cancel", "to confirm", "for shortcuts"} {
		if strings.Contains(l, k) {
			return true
		}
	}
	return false
}

var reOption = regexp.MustCompile(`^([❯›>➤▶▸→]\s*)?(\d{1,2})[.)]\s+\S`)

// option parses a numbered menu entry: its number and whether it is selected.
func option(s string) (n int, selected, ok bool) {
	m := reOption.FindStringSubmatch(s)
	if m == nil {
		return 0, false, false
	}
	n, _ = strconv.Atoi(m[2])
	return n, m[1] != "", true
}

// candidate is a prompt found at the bottom of the screen.
type candidate struct {
	text  string
	first int // window row where the prompt starts
	last  int // window row where it ends
}

type shownRow struct {
	text string // normalized
	idx  int    // window row
}

// scanRows is how many rows with text, from the bottom, detection looks at.
const scanRows = 24

// detect finds a prompt at the bottom of the window rows: the last line with
// text (after skipping dialog borders and up to 3 key-hint lines) looks like a
// prompt, or the bottom is a numbered menu 1…n that either has a selected
// entry or follows a question.
func detect(rows [][]rune) (candidate, bool) {
	var shown []shownRow // bottom first
	for i := len(rows) - 1; i >= 0 && len(shown) < scanRows; i-- {
		if t := normalize(string(rows[i])); t != "" {
			shown = append(shown, shownRow{t, i})
		}
	}
	for hints := 0; len(shown) > 0 && hints < 3 && footerHint(shown[0].text); hints++ {
		shown = shown[1:]
	}
	if len(shown) == 0 {
		return candidate{}, false
	}
	if c, ok := detectMenu(shown); ok {
		return c, true
	}
	if looksLikePrompt(shown[0].text) {
		return candidate{text: shown[0].text, first: shown[0].idx, last: shown[0].idx}, true
	}
	return candidate{}, false
}

// detectMenu reads a numbered menu upward from the bottom. Rows that are not
// entries are allowed, at most 2 in a row, as entries wrapped over lines.
func detectMenu(shown []shownRow) (candidate, bool) {
	want, entries, between, selected := 0, 0, 0, false
	top := -1
	for k, r := range shown {
		n, sel, ok := option(r.text)
		if !ok || (want != 0 && n != want) {
			between++
			if between > 2 {
				return candidate{}, false
			}
			continue
		}
		between = 0
		entries++
		selected = selected || sel
		if n == 1 {
			top = k
			break
		}
		want = n - 1
	}
	if top < 0 || entries < 2 {
		return candidate{}, false
	}
	lines := make([]string, 0, top+2)
	first := shown[top].idx
	if top+1 < len(shown) {
		if q := shown[top+1].text; looksLikePrompt(q) || strings.HasSuffix(q, ":") {
			lines = append(lines, q)
			first = shown[top+1].idx
		} else if !selected {
			return candidate{}, false
		}
	} else if !selected {
		return candidate{}, false
	}
	for k := top; k >= 0; k-- {
		lines = append(lines, shown[k].text)
	}
	return candidate{text: strings.Join(lines, "\n"), first: first, last: shown[0].idx}, true
}

// context renders up to max bytes of the text shown before window row first,
// starting at a line boundary when it can.
func (s *screen) context(first, limit int) string {
	var b []byte
	b = append(b, s.out...)
	for _, r := range s.rows[:first] {
		b = utf8AppendRunes(b, trimBlank(r))
		b = append(b, '\n')
	}
	if len(b) > limit {
		cut := len(b) - limit
		if i := bytes.IndexByte(b[cut:], '\n'); i >= 0 && cut+i+1 < len(b) {
			b = b[cut+i+1:]
		} else {
			b = cutTail(b, limit)
		}
	}
	return strings.Trim(string(b), "\n")
}
