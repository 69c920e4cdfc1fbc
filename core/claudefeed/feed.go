// Package claudefeed turns the output of a headless Claude Code run
// (claude -p … --output-format stream-json --verbose) into a typed activity
// feed: assistant text, thinking, tool calls, tool results and the final
// result with its cost.
//
// It is pure: the caller feeds the bytes as they arrive, in chunks of any
// size, and gets events back. Nothing here reads, writes or keeps time.
//
// The rules:
//
//   - One stream-json line gives zero or more events (an assistant message
//     gives one per content block); events are numbered 1, 2, 3… in Seq, so 0
//     never names an event.
//   - The events do not depend on how the bytes were split into chunks.
//   - Lines end in "\n"; a "\r" before it (a PTY), blank lines, a UTF-8 BOM,
//     and ANSI escape sequences or control characters anywhere in a line are
//     ignored. Escapes cannot occur inside valid JSON, so removing them never
//     changes a line that was valid.
//   - A line that is not a JSON object gives an "invalid" event and parsing
//     goes on with the next line.
//   - A line longer than the limit (MaxLine) is not kept: its first bytes and
//     its length are, and it gives an "invalid" event when it ends.
//   - Types, subtypes and content blocks this package does not know give an
//     "unknown" event; fields it does not know are ignored, and a known field
//     of an unexpected JSON type reads as its zero value.
//   - Text, Result, Raw and ToolInput are bounded (MaxText, MaxRaw,
//     MaxToolInput) so a feed can be kept in memory.
package claudefeed

import "encoding/json"

// Kind is what an Event reports.
type Kind string

// The kinds of Event.
const (
	KindInit          Kind = "init"           // system/init: session, model, cwd, tools
	KindAssistantText Kind = "assistant_text" // a text block from the assistant
	KindThinking      Kind = "thinking"       // a thinking block (Text empty when redacted)
	KindToolCall      Kind = "tool_call"      // a tool_use block
	KindToolResult    Kind = "tool_result"    // a tool_result block sent back to the model
	KindResult        Kind = "result"         // the final result of the run
	KindUnknown       Kind = "unknown"        // valid JSON of a type not understood here
	KindInvalid       Kind = "invalid"        // not a JSON object, or a line too long
)

// Bounds on what an Event and the Parser hold.
const (
	// MaxLine is the longest line parsed; longer lines are dropped.
	MaxLine = 4 << 20
	// MaxText bounds Event.Text, Event.Result and Summary.LastText/Result.
	MaxText = 8 << 10
	// MaxRaw bounds Event.Raw.
	MaxRaw = 4 << 10
	// MaxToolInput bounds Event.ToolInput; a larger input has its long
	// strings shortened so it stays valid JSON.
	MaxToolInput = 64 << 10
)

// Event is one entry of the activity feed.
type Event struct {
	Kind Kind
	// Seq is the event's position in the feed, from 1.
	Seq int
	// SessionID is Claude's session id: the line's own, else the last one
	// seen. Model likewise (from init or the assistant message).
	SessionID, Model string
	// ParentToolUseID is set on messages of a subagent: the Task tool call
	// they belong to.
	ParentToolUseID string

	// Text is what a feed shows: the assistant text, the thinking, the most
	// telling field of a tool call's input (command, file path, pattern…), the tool
	// result text, the errors of a failed result, the text of an unknown
	// user message, or why a line is invalid. At most MaxText bytes, cut at
	// a UTF-8 boundary; Truncated says it was cut.
	Text      string
	Truncated bool

	// ToolName and ToolUseID are set on tool calls and tool results (the
	// name of a result is the name of its call, when that was seen).
	ToolName, ToolUseID string
	// ToolInput is the tool call's input, verbatim up to MaxToolInput (then
	// shortened, and Truncated set).
	ToolInput json.RawMessage
	// IsError is a tool result's is_error, or a result's.
	IsError bool

	// CWD and Tools come with init.
	CWD   string
	Tools []string

	// Subtype is a result's subtype ("success", "error_max_turns",
	// "error_during_execution"…), init's "init", or for an unknown event
	// what was not understood: "stream_event", "system/compact_boundary",
	// "assistant/server_tool_use", "user/text"…
	Subtype string
	// Result only.
	NumTurns                  int
	DurationMS, DurationAPIMS int64
	CostUSD                   float64
	Result                    string

	// Raw is the line, without its line ending, up to MaxRaw bytes. Events
	// from the same line share it: do not modify.
	Raw []byte
}

// Summary is the state of the run so far.
type Summary struct {
	// Turns counts the main agent's assistant messages until the result comes, then is the
	// result's num_turns.
	Turns     int
	ToolCalls int
	ToolsUsed map[string]int // tool name → calls
	// Done: a result was seen. Success: it was "success" and not an error.
	Done, Success bool
	CostUSD       float64
	DurationMS    int64
	LastText      string // the last assistant text
	Result        string
}
