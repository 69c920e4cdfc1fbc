package claudefeed

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

const sid = "9b2f6c1e-4d3a-4f0e-8a7b-2c5d1e0f3a91"

func session(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/session.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parse feeds chunks to a new parser, then flushes it.
func parse(chunks ...[]byte) ([]Event, *Parser) {
	p := NewParser()
	var evs []Event
	for _, c := range chunks {
		evs = append(evs, p.Write(c)...)
	}
	return append(evs, p.Flush()...), p
}

func parseString(s string) []Event {
	evs, _ := parse([]byte(s))
	return evs
}

func kinds(evs []Event) []Kind {
	ks := make([]Kind, len(evs))
	for i, e := range evs {
		ks[i] = e.Kind
	}
	return ks
}

func TestSession(t *testing.T) {
	evs, _ := parse(session(t))
	want := []Kind{KindInit, KindAssistantText, KindToolCall, KindToolResult, KindAssistantText, KindResult}
	if got := kinds(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("kinds = %v, want %v", got, want)
	}
	for i, e := range evs {
		if e.Seq != i+1 {
			t.Errorf("event %d: Seq = %d", i, e.Seq)
		}
		if e.SessionID != sid || e.Model != "claude-sonnet-4-5-20250929" {
			t.Errorf("event %d: session %q model %q", i, e.SessionID, e.Model)
		}
		if len(e.Raw) == 0 || e.Raw[0] != '{' {
			t.Errorf("event %d: Raw = %.40q", i, e.Raw)
		}
	}
	init := evs[0]
	if init.CWD != "/home/agent/work" || len(init.Tools) != 9 || init.Tools[1] != "Bash" || init.Subtype != "init" {
		t.Errorf("init = %+v", init)
	}
	if evs[1].Text != "I'll check which Go version is installed." {
		t.Errorf("text = %q", evs[1].Text)
	}
	call := evs[2]
	if call.ToolName != "Bash" || call.ToolUseID != "toolu_01AbCdEfGhJkLmNoPqRsTuVw" || call.Text != "go version" ||
		string(call.ToolInput) != `{"command":"go version","description":"Show the installed Go version"}` {
		t.Errorf("tool call = %+v", call)
	}
	res := evs[3]
	if res.ToolName != "Bash" || res.ToolUseID != call.ToolUseID || res.Text != "go version go1.26.8 linux/amd64" || res.IsError {
		t.Errorf("tool result = %+v", res)
	}
	fin := evs[5]
	if fin.Subtype != "success" || fin.IsError || fin.NumTurns != 3 || fin.DurationMS != 5123 ||
		fin.DurationAPIMS != 4870 || fin.CostUSD != 0.0123 || fin.Result != "Go 1.26.8 is installed (linux/amd64)." {
		t.Errorf("result = %+v", fin)
	}
}

func TestSummary(t *testing.T) {
	data := session(t)
	p := NewParser()
	// Before the result: turns are counted from assistant messages (two
	// lines with the same message id are one turn).
	last := bytes.LastIndex(data[:len(data)-1], []byte("\n"))
	p.Write(data[:last+1])
	s := p.Summary()
	if s.Turns != 2 || s.Done || s.Success || s.ToolCalls != 1 || s.LastText != "Go 1.26.8 is installed (linux/amd64)." {
		t.Errorf("before result: %+v", s)
	}
	p.Write(data[last+1:])
	want := Summary{
		Turns: 3, ToolCalls: 1, ToolsUsed: map[string]int{"Bash": 1}, Done: true, Success: true,
		CostUSD: 0.0123, DurationMS: 5123, LastText: "Go 1.26.8 is installed (linux/amd64).",
		Result: "Go 1.26.8 is installed (linux/amd64).",
	}
	s = p.Summary()
	if !reflect.DeepEqual(s, want) {
		t.Errorf("summary = %+v\nwant      %+v", s, want)
	}
	s.ToolsUsed["Bash"] = 99
	if p.Summary().ToolsUsed["Bash"] != 1 {
		t.Error("Summary shares its map with the parser")
	}
	if NewParser().Summary().ToolsUsed == nil {
		t.Error("empty summary has a nil map")
	}
}

func TestSplitAtEveryByte(t *testing.T) {
	data := session(t)
	want, _ := parse(data)
	for i := 0; i <= len(data); i++ {
		got, _ := parse(data[:i], data[i:])
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("split at %d: events differ", i)
		}
	}
	var bytewise [][]byte
	for i := range data {
		bytewise = append(bytewise, data[i:i+1])
	}
	if got, _ := parse(bytewise...); !reflect.DeepEqual(got, want) {
		t.Fatal("one byte at a time: events differ")
	}
}

func TestCRLFAndTerminalJunk(t *testing.T) {
	data := session(t)
	want, _ := parse(data)
	crlf := bytes.ReplaceAll(data, []byte("\n"), []byte("\r\n"))
	if got, _ := parse(crlf); !reflect.DeepEqual(got, want) {
		t.Error("CRLF: events differ")
	}
	// What a PTY may add: a BOM, cursor and colour escapes, a window title,
	// blank lines.
	lines := strings.SplitAfter(strings.TrimSuffix(string(data), "\n"), "\n")
	junk := "\xef\xbb\xbf\x1b[?25l\x1b]0;claude\x07  " + lines[0] + "\r\n\r\n  \r\n" +
		"\x1b[0m" + strings.Join(lines[1:], "") + "\x1b[?25h\r\n"
	got, _ := parse([]byte(junk))
	if !reflect.DeepEqual(kinds(got), kinds(want)) {
		t.Fatalf("junk: kinds = %v", kinds(got))
	}
	for i := range got {
		got[i].Raw, want[i].Raw = nil, nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Error("junk: events differ")
	}
}

func TestFlushLastLine(t *testing.T) {
	p := NewParser()
	line := `{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}`
	if evs := p.Write([]byte(line)); len(evs) != 0 {
		t.Fatalf("events before the line ends: %v", evs)
	}
	evs := p.Flush()
	if len(evs) != 1 || evs[0].Kind != KindAssistantText || evs[0].Text != "hi" {
		t.Fatalf("flush = %+v", evs)
	}
	if evs := p.Flush(); evs != nil {
		t.Errorf("second flush = %+v", evs)
	}
	evs = p.Write([]byte(line + "\n"))
	if len(evs) != 1 || evs[0].Seq != 2 {
		t.Errorf("after flush = %+v", evs)
	}
}

func TestInvalidLines(t *testing.T) {
	in := "not json at all\n" +
		`{"type":"assistant","message":` + "\n" +
		"[1,2,3]\n" +
		"null\n" +
		`{"type":"result"} trailing` + "\n" +
		`{"type":"assistant","message":{"content":[{"type":"text","text":"still here"}]}}` + "\n"
	evs := parseString(in)
	want := []Kind{KindInvalid, KindInvalid, KindInvalid, KindInvalid, KindInvalid, KindAssistantText}
	if !reflect.DeepEqual(kinds(evs), want) {
		t.Fatalf("kinds = %v", kinds(evs))
	}
	for i, e := range evs[:5] {
		if e.Text == "" || len(e.Raw) == 0 || e.Seq != i+1 {
			t.Errorf("invalid event %d = %+v", i, e)
		}
	}
	if string(evs[0].Raw) != "not json at all" {
		t.Errorf("raw = %q", evs[0].Raw)
	}
	if evs[5].Text != "still here" || evs[5].Seq != 6 {
		t.Errorf("after invalid lines: %+v", evs[5])
	}
}

func TestUnknown(t *testing.T) {
	in := `{"type":"stream_event","event":{"type":"content_block_delta"},"session_id":"s1"}
{"type":"system","subtype":"compact_boundary","compact_metadata":{"trigger":"auto"}}
{"type":"assistant","message":{"id":"m1","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search"},{"type":"text","text":"ok","citations":null,"future":1}]},"new_field":{"a":[1]}}
{"type":"user","message":{"role":"user","content":"[Request interrupted by user]"}}
{"type":"user","message":{"role":"user","content":[{"type":"image","source":{}}]}}
{"no_type":true}
{"type":"assistant","message":"not an object"}
{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"hmm","signature":"x"},{"type":"redacted_thinking","data":"…"},7]}}
`
	evs := parseString(in)
	type row struct {
		k       Kind
		subtype string
		text    string
	}
	want := []row{
		{KindUnknown, "stream_event", ""},
		{KindUnknown, "system/compact_boundary", ""},
		{KindUnknown, "assistant/server_tool_use", ""},
		{KindAssistantText, "", "ok"},
		{KindUnknown, "user/text", "[Request interrupted by user]"},
		{KindUnknown, "user/image", ""},
		{KindUnknown, "", ""},
		{KindUnknown, "assistant", ""},
		{KindThinking, "", "hmm"},
		{KindThinking, "", ""},
		{KindUnknown, "assistant/", ""},
	}
	var got []row
	for _, e := range evs {
		got = append(got, row{e.Kind, e.Subtype, e.Text})
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
	if evs[0].SessionID != "s1" || evs[1].SessionID != "s1" {
		t.Errorf("session id not carried over: %q %q", evs[0].SessionID, evs[1].SessionID)
	}
}

func TestToolResultContent(t *testing.T) {
	in := `{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"/etc/hosts"}},{"type":"tool_use","id":"t2","name":"Grep","input":{"pattern":"TODO","path":"."}}]}}
{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"127.0.0.1 localhost"},{"type":"image","source":{"type":"base64"}},{"type":"text","text":"::1 localhost"}]}]}}
{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"grep: bad pattern","is_error":true}]}}
{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t9"}]}}
`
	evs := parseString(in)
	if !reflect.DeepEqual(kinds(evs), []Kind{KindToolCall, KindToolCall, KindToolResult, KindToolResult, KindToolResult}) {
		t.Fatalf("kinds = %v", kinds(evs))
	}
	if evs[0].Text != "/etc/hosts" || evs[1].Text != "TODO" {
		t.Errorf("call summaries %q %q", evs[0].Text, evs[1].Text)
	}
	r := evs[2]
	if r.ToolName != "Read" || r.Text != "127.0.0.1 localhost\n[image]\n::1 localhost" || r.IsError {
		t.Errorf("array content: %+v", r)
	}
	r = evs[3]
	if r.ToolName != "Grep" || r.Text != "grep: bad pattern" || !r.IsError {
		t.Errorf("string content: %+v", r)
	}
	r = evs[4]
	if r.ToolName != "" || r.ToolUseID != "t9" || r.Text != "" {
		t.Errorf("unmatched result: %+v", r)
	}
}

func TestErrorResults(t *testing.T) {
	for _, tc := range []struct {
		line, subtype, text string
	}{
		{`{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":10,"duration_ms":60000,"duration_api_ms":58000,"total_cost_usd":0.5,"session_id":"s"}`, "error_max_turns", ""},
		{`{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":2,"errors":["API Error: 529 overloaded","gave up"]}`, "error_during_execution", "API Error: 529 overloaded\ngave up"},
		// Without is_error, the subtype decides; an old "cost_usd" is read.
		{`{"type":"result","subtype":"error_max_turns","num_turns":"x","cost_usd":0.25}`, "error_max_turns", ""},
		// success but is_error: a run that ended on an API error.
		{`{"type":"result","subtype":"success","is_error":true,"result":"API Error: 401"}`, "success", ""},
	} {
		p := NewParser()
		evs := p.Write([]byte(tc.line + "\n"))
		if len(evs) != 1 {
			t.Fatalf("%s: %d events", tc.subtype, len(evs))
		}
		e := evs[0]
		if e.Kind != KindResult || e.Subtype != tc.subtype || !e.IsError || e.Text != tc.text {
			t.Errorf("%s: %+v", tc.line, e)
		}
		s := p.Summary()
		if !s.Done || s.Success || s.CostUSD != e.CostUSD || s.Turns != e.NumTurns {
			t.Errorf("%s: summary %+v", tc.line, s)
		}
	}
	evs := parseString(`{"type":"result","subtype":"error_max_turns","num_turns":"x","cost_usd":0.25}` + "\n")
	if evs[0].CostUSD != 0.25 || evs[0].NumTurns != 0 {
		t.Errorf("fallbacks: %+v", evs[0])
	}
}

func TestLongLineWithinLimit(t *testing.T) {
	// 2 MiB of tool output: parsed, its text cut to MaxText on a rune.
	big := strings.Repeat("é", 1<<20)
	line := `{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","content":` + quote(big) + `}]}}` + "\n"
	evs := parseString(line)
	if len(evs) != 1 || evs[0].Kind != KindToolResult || !evs[0].Truncated {
		t.Fatalf("events = %v", kinds(evs))
	}
	if n := len(evs[0].Text); n > MaxText || n < MaxText-1 || !strings.HasPrefix(big, evs[0].Text) {
		t.Errorf("text of %d bytes, not a prefix cut on a rune", n)
	}
	if len(evs[0].Raw) != MaxRaw {
		t.Errorf("raw of %d bytes", len(evs[0].Raw))
	}
}

func TestLineOverLimit(t *testing.T) {
	p := NewParser()
	head := `{"type":"user","message":{"content":[{"type":"tool_result","content":"`
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	var evs []Event
	evs = append(evs, p.Write([]byte(head))...)
	total := len(head)
	for total < MaxLine+1<<20 { // 5 MiB, fed as a PTY would
		evs = append(evs, p.Write(chunk)...)
		total += len(chunk)
		if cap(p.buf) > MaxLine || cap(p.head) > MaxRaw {
			t.Fatalf("buffer grew to %d bytes", cap(p.buf))
		}
	}
	evs = append(evs, p.Write([]byte("\"}]}}\r\n"+`{"type":"result","subtype":"success","is_error":false}`+"\n"))...)
	total += len("\"}]}}\r")
	if !reflect.DeepEqual(kinds(evs), []Kind{KindInvalid, KindResult}) {
		t.Fatalf("kinds = %v", kinds(evs))
	}
	e := evs[0]
	if !strings.Contains(e.Text, itoa(total)+" bytes") || len(e.Raw) != MaxRaw || !bytes.HasPrefix(e.Raw, []byte(head)) {
		t.Errorf("invalid event: text %q, raw %d bytes", e.Text, len(e.Raw))
	}
	if cap(p.buf) > keepBuf {
		t.Errorf("buffer of %d bytes kept after the line", cap(p.buf))
	}
	// Flush reports a too-long last line too.
	p.Write(bytes.Repeat([]byte("y"), MaxLine+1))
	evs = p.Flush()
	if len(evs) != 1 || evs[0].Kind != KindInvalid || !strings.Contains(evs[0].Text, itoa(MaxLine+1)+" bytes") {
		t.Errorf("flush = %+v", evs)
	}
}

func TestToolInputBounded(t *testing.T) {
	content := strings.Repeat("<line>\n", 20000) // 140 KB file written by the Write tool
	in := `{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t","name":"Write","input":{"file_path":"/w/a.txt","content":` +
		quote(content) + `,"n":12345678901234567890}}]}}` + "\n"
	e := parseString(in)[0]
	if e.Kind != KindToolCall || !e.Truncated || len(e.ToolInput) > MaxToolInput || e.Text != "/w/a.txt" {
		t.Fatalf("event = %v %v %d %q", e.Kind, e.Truncated, len(e.ToolInput), e.Text)
	}
	var v obj
	if err := json.Unmarshal(e.ToolInput, &v); err != nil {
		t.Fatalf("shortened input is not JSON: %v", err)
	}
	if v.str("file_path") != "/w/a.txt" || string(v["n"]) != "12345678901234567890" ||
		!strings.HasPrefix(content, strings.TrimSuffix(v.str("content"), "…")) {
		t.Errorf("shortened input = %.200s", e.ToolInput)
	}
}

func TestSubagentAndSyntheticModel(t *testing.T) {
	in := `{"type":"system","subtype":"init","session_id":"s","model":"m1"}
{"type":"assistant","message":{"id":"a","model":"<synthetic>","content":[{"type":"text","text":"x"}]},"parent_tool_use_id":"toolu_task"}
`
	evs := parseString(in)
	if evs[1].Model != "m1" || evs[1].ParentToolUseID != "toolu_task" || evs[1].SessionID != "s" {
		t.Errorf("event = %+v", evs[1])
	}
	p := NewParser()
	p.Write([]byte(in))
	if s := p.Summary(); s.Turns != 0 || s.LastText != "" {
		t.Errorf("a subagent message counted in the summary: %+v", s)
	}
}

func TestFakeClaude(t *testing.T) {
	fi, err := os.Stat("testdata/fake-claude")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&0o111 == 0 {
		t.Error("testdata/fake-claude is not executable")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal("sh is required to run the fake claude script")
	}
	cmd := exec.Command(sh, "testdata/fake-claude", "-p", "hello", "--output-format", "stream-json", "--verbose")
	cmd.Env = append(os.Environ(), "FAKE_CLAUDE_SLEEP=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, session(t)) {
		t.Error("fake-claude does not print testdata/session.jsonl")
	}
}

func TestStripANSI(t *testing.T) {
	for in, want := range map[string]string{
		"\x1b[1;31m{\x1b[0m}":           "{}",
		"\x1b]0;title\x07{}":            "{}",
		"\x1b]8;;http://x\x1b\\{}":      "{}",
		"\x1bP1$r0m\x1b\\{}\x1b(B":      "{}",
		"{\x00\x08\x7f}\x1b":            "{}",
		"{\"a\":\t1}":                   "{\"a\":\t1}",
		"\x1b[":                         "",
		"{\"é\":\"日本\"}\x1b[?2004h":     "{\"é\":\"日本\"}",
		"\x1b[38;2;255;0;0m{\"x\":1}\r": "{\"x\":1}",
	} {
		if got := string(stripANSI([]byte(in))); got != want {
			t.Errorf("stripANSI(%q) = %q, want %q", in, got, want)
		}
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
