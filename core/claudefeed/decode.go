package claudefeed

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// obj is a decoded JSON object. Decoding into raw fields rather than tagged
// structs lets a field of an unexpected type read as zero instead of failing
// the whole line, and keeps JSON tags out of core.
type obj map[string]json.RawMessage

func (o obj) str(k string) string {
	var s string
	if json.Unmarshal(o[k], &s) != nil {
		return ""
	}
	return s
}

func (o obj) boolean(k string) (v, ok bool) {
	return v, json.Unmarshal(o[k], &v) == nil && o[k] != nil && string(o[k]) != "null"
}

func (o obj) int64(k string) int64 {
	var n int64
	if json.Unmarshal(o[k], &n) == nil {
		return n
	}
	var f float64 // 12.0 or 1e3 from a future encoder
	if json.Unmarshal(o[k], &f) == nil && f > -1e18 && f < 1e18 {
		return int64(f)
	}
	return 0
}

func (o obj) float(k string) (float64, bool) {
	var f float64
	return f, json.Unmarshal(o[k], &f) == nil && o[k] != nil && string(o[k]) != "null"
}

func (o obj) object(k string) obj {
	var m obj
	if json.Unmarshal(o[k], &m) != nil {
		return nil
	}
	return m
}

// line turns one line (without "\n") into events appended to out.
func (p *Parser) line(out []Event, b []byte) []Event {
	b = bytes.TrimRight(b, "\r")
	raw := bytes.Clone(b[:min(len(b), MaxRaw)])
	b = clean(b)
	if len(b) == 0 {
		return out // blank lines (or a line of escapes only) are not events
	}
	var m obj
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		why := "not a JSON object"
		if err != nil {
			why = "invalid JSON: " + err.Error()
		}
		return append(out, p.event(Event{Kind: KindInvalid, Text: why, Raw: raw}))
	}
	base := Event{SessionID: m.str("session_id"), ParentToolUseID: m.str("parent_tool_use_id"), Raw: raw}
	if base.SessionID != "" {
		p.sessionID = base.SessionID
	}
	switch typ := m.str("type"); typ {
	case "system":
		return p.system(out, m, base)
	case "assistant":
		return p.assistant(out, m, base)
	case "user":
		return p.user(out, m, base)
	case "result":
		return p.result(out, m, base)
	default:
		base.Kind, base.Subtype = KindUnknown, typ
		return append(out, p.event(base))
	}
}

func (p *Parser) system(out []Event, m obj, e Event) []Event {
	sub := m.str("subtype")
	if sub != "init" {
		e.Kind, e.Subtype = KindUnknown, "system/"+sub
		return append(out, p.event(e))
	}
	e.Kind, e.Subtype = KindInit, sub
	e.Model, e.CWD = m.str("model"), m.str("cwd")
	var tools []string
	if json.Unmarshal(m["tools"], &tools) == nil {
		e.Tools = tools
	}
	if e.Model != "" {
		p.model = e.Model
	}
	return append(out, p.event(e))
}

// blocks reads message.content: an array of blocks, or a plain string, which
// is returned as one text block.
func blocks(msg obj) []obj {
	var s string
	if json.Unmarshal(msg["content"], &s) == nil {
		return []obj{{"type": json.RawMessage(`"text"`), "text": msg["content"]}}
	}
	var raws []json.RawMessage
	if json.Unmarshal(msg["content"], &raws) != nil {
		return nil
	}
	bs := make([]obj, 0, len(raws))
	for _, r := range raws {
		var b obj
		if json.Unmarshal(r, &b) != nil {
			b = obj{} // not an object: reported as an unknown block
		}
		bs = append(bs, b)
	}
	return bs
}

func (p *Parser) assistant(out []Event, m obj, base Event) []Event {
	msg := m.object("message")
	if msg == nil {
		base.Kind, base.Subtype = KindUnknown, "assistant"
		return append(out, p.event(base))
	}
	// Claude Code prints each content block of one API message as its own
	// line with the same message id; that is one turn. A subagent's messages
	// (under a Task call) are not turns of the run.
	top := base.ParentToolUseID == ""
	if id := msg.str("id"); top && (id == "" || id != p.lastMsgID) {
		p.sum.Turns++
		p.lastMsgID = id
	}
	if model := msg.str("model"); model != "" && !strings.HasPrefix(model, "<") {
		p.model = model // "<synthetic>" marks messages Claude Code made up itself
	}
	for _, b := range blocks(msg) {
		e := base
		switch typ := b.str("type"); typ {
		case "text":
			e.Kind = KindAssistantText
			e.Text, e.Truncated = bound(b.str("text"), MaxText)
			if top {
				p.sum.LastText = e.Text
			}
		case "thinking":
			e.Kind = KindThinking
			e.Text, e.Truncated = bound(b.str("thinking"), MaxText)
		case "redacted_thinking":
			e.Kind = KindThinking
		case "tool_use":
			e.Kind = KindToolCall
			e.ToolUseID, e.ToolName = b.str("id"), b.str("name")
			e.ToolInput, e.Truncated = boundInput(b["input"])
			var cut bool
			e.Text, cut = bound(inputSummary(b.object("input")), MaxText)
			e.Truncated = e.Truncated || cut
			p.sum.ToolCalls++
			if p.sum.ToolsUsed == nil {
				p.sum.ToolsUsed = map[string]int{}
			}
			p.sum.ToolsUsed[e.ToolName]++
			if e.ToolUseID != "" {
				if p.pending == nil || len(p.pending) >= maxPending {
					p.pending = map[string]string{}
				}
				p.pending[e.ToolUseID] = e.ToolName
			}
		default:
			e.Kind, e.Subtype = KindUnknown, "assistant/"+typ
		}
		out = append(out, p.event(e))
	}
	return out
}

func (p *Parser) user(out []Event, m obj, base Event) []Event {
	msg := m.object("message")
	if msg == nil {
		base.Kind, base.Subtype = KindUnknown, "user"
		return append(out, p.event(base))
	}
	for _, b := range blocks(msg) {
		e := base
		switch typ := b.str("type"); typ {
		case "tool_result":
			e.Kind = KindToolResult
			e.ToolUseID = b.str("tool_use_id")
			e.ToolName = p.pending[e.ToolUseID]
			delete(p.pending, e.ToolUseID)
			e.IsError, _ = b.boolean("is_error")
			e.Text, e.Truncated = bound(resultText(b["content"]), MaxText)
		case "text":
			e.Kind, e.Subtype = KindUnknown, "user/text"
			e.Text, e.Truncated = bound(b.str("text"), MaxText)
		default:
			e.Kind, e.Subtype = KindUnknown, "user/"+typ
		}
		out = append(out, p.event(e))
	}
	return out
}

func (p *Parser) result(out []Event, m obj, e Event) []Event {
	e.Kind = KindResult
	e.Subtype = m.str("subtype")
	isErr, ok := m.boolean("is_error")
	if !ok {
		isErr = e.Subtype != "success"
	}
	e.IsError = isErr
	e.NumTurns = int(m.int64("num_turns"))
	e.DurationMS, e.DurationAPIMS = m.int64("duration_ms"), m.int64("duration_api_ms")
	cost, ok := m.float("total_cost_usd")
	if !ok {
		cost, _ = m.float("cost_usd") // the name before total_cost_usd
	}
	e.CostUSD = cost
	var cutR, cutT bool
	e.Result, cutR = bound(m.str("result"), MaxText)
	var errs []string
	_ = json.Unmarshal(m["errors"], &errs) // newer versions explain failures here
	e.Text, cutT = bound(strings.Join(errs, "\n"), MaxText)
	e.Truncated = cutR || cutT

	p.sum.Done = true
	p.sum.Success = !e.IsError && e.Subtype == "success"
	if e.NumTurns > 0 {
		p.sum.Turns = e.NumTurns
	}
	p.sum.CostUSD, p.sum.DurationMS, p.sum.Result = e.CostUSD, e.DurationMS, e.Result
	return append(out, p.event(e))
}

// resultText reads a tool_result's content: a string, or an array of blocks
// whose text is joined by newlines (other blocks show as "[type]").
func resultText(content json.RawMessage) string {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s
	}
	var raws []json.RawMessage
	if json.Unmarshal(content, &raws) != nil {
		return ""
	}
	var sb strings.Builder
	for i, r := range raws {
		if sb.Len() > MaxText {
			break // the rest would be cut anyway
		}
		if i > 0 {
			sb.WriteByte('\n')
		}
		var b obj
		_ = json.Unmarshal(r, &b)
		if typ := b.str("type"); typ == "text" {
			sb.WriteString(b.str("text"))
		} else {
			sb.WriteString("[" + typ + "]")
		}
	}
	return sb.String()
}

// summaryKeys are the input fields that say best what a tool call does, most
// telling first (Bash: command; Read/Edit/Write: file_path; Grep: pattern…).
var summaryKeys = []string{"command", "file_path", "notebook_path", "pattern", "url", "query", "path", "description", "prompt", "skill"}

func inputSummary(in obj) string {
	for _, k := range summaryKeys {
		if s := in.str(k); s != "" {
			return s
		}
	}
	return ""
}

// bound cuts s to at most n bytes at a UTF-8 boundary. The cut is copied so
// a large decoded string is not kept alive by its head.
func bound(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return strings.Clone(s[:i]), true
}

// shortString is how much of each string an oversized tool input keeps.
const shortString = 1024

// boundInput keeps a tool input verbatim when small; otherwise it shortens
// its long strings (a Write's file content, say) so it stays valid JSON
// within MaxToolInput, or drops it when even that is too big.
func boundInput(in json.RawMessage) (json.RawMessage, bool) {
	if len(in) <= MaxToolInput {
		return in, false
	}
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber() // keep numbers as written
	var v any
	if dec.Decode(&v) != nil {
		return nil, true
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(shorten(v)) != nil || buf.Len() > MaxToolInput {
		return nil, true
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), true
}

func shorten(v any) any {
	switch v := v.(type) {
	case string:
		if s, cut := bound(v, shortString); cut {
			return s + "…"
		}
		return v
	case []any:
		for i := range v {
			v[i] = shorten(v[i])
		}
	case map[string]any:
		for k := range v {
			v[k] = shorten(v[k])
		}
	}
	return v
}

// clean removes what a terminal adds around a JSON line: a BOM, ANSI escape
// sequences, other control characters, and surrounding blanks. It copies only
// when there is something to remove inside the line.
func clean(b []byte) []byte {
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	dirty := false
	for _, c := range b {
		if (c < 0x20 && c != '\t') || c == 0x7f {
			dirty = true
			break
		}
	}
	if dirty {
		b = stripANSI(b)
	}
	return bytes.TrimSpace(b)
}

// stripANSI drops escape sequences (CSI, OSC/DCS/APC/PM/SOS strings, and
// two-byte escapes) and other C0 controls but tab, and DEL.
func stripANSI(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != 0x1b {
			if (c >= 0x20 && c != 0x7f) || c == '\t' {
				out = append(out, c)
			}
			continue
		}
		if i+1 >= len(b) {
			break
		}
		i++
		switch b[i] {
		case '[': // CSI: parameters and intermediates, then a final byte
			for i+1 < len(b) {
				i++
				if b[i] >= 0x40 && b[i] <= 0x7e {
					break
				}
			}
		case ']', 'P', 'X', '^', '_': // a string ended by BEL or ESC \
			for i+1 < len(b) {
				i++
				if b[i] == 0x07 {
					break
				}
				if b[i] == 0x1b && i+1 < len(b) && b[i+1] == '\\' {
					i++
					break
				}
			}
		default: // ESC, intermediates, then a final byte
			for b[i] >= 0x20 && b[i] <= 0x2f && i+1 < len(b) {
				i++
			}
		}
	}
	return out
}
