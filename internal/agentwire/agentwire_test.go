package agentwire

import (
	"reflect"
	"testing"
	"time"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

func TestCommandSpecRoundTrip(t *testing.T) {
	for _, typ := range []ports.SessionType{"", ports.SessionInteractive, ports.SessionHeadless, ports.SessionBackground} {
		spec := ports.CommandSpec{
			Command: "sh", Args: []string{"-c", "true"}, WorkingDir: "/w", Env: map[string]string{"A": "1"},
			Timeout: 3 * time.Second, RunAs: "nobody", PTY: true, Cols: 80, Rows: 24, Term: "xterm",
			StdinOpen: true, SessionID: "s1", SessionName: "n", SessionType: typ, Persist: true,
		}
		req := CommandRequest("c1", spec)
		if req.GetCommandId() != "c1" {
			t.Fatalf("id %q", req.GetCommandId())
		}
		if got := CommandSpec(req); !reflect.DeepEqual(got, spec) {
			t.Fatalf("round trip of %q:\n got %+v\nwant %+v", typ, got, spec)
		}
	}
	// A sub-second timeout rounds up: zero would mean none.
	if got := CommandRequest("c", ports.CommandSpec{Timeout: 10 * time.Millisecond}).GetTimeoutSeconds(); got != 1 {
		t.Fatalf("timeout seconds %d", got)
	}
	// Terminal sizes beyond uint16 are clamped, not wrapped.
	if got := CommandSpec(&sandboxv1.CommandRequest{PtyCols: 70000}); got.Cols != 0xffff {
		t.Fatalf("cols %d", got.Cols)
	}
}

func TestEnumsRoundTrip(t *testing.T) {
	for _, s := range []ports.OutputStream{ports.StreamStdout, ports.StreamStderr, ports.StreamPTY} {
		if got := StreamFromProto(StreamToProto(s)); got != s {
			t.Errorf("stream %v -> %v", s, got)
		}
	}
	for _, k := range []ports.RuntimeKind{ports.KindHost, ports.KindContainer, ports.KindVM} {
		if got := RuntimeKindFromProto(RuntimeKindToProto(k)); got != k {
			t.Errorf("kind %v -> %v", k, got)
		}
	}
	if RuntimeKindFromProto(sandboxv1.RuntimeKind_RUNTIME_KIND_UNSPECIFIED) != "" {
		t.Error("an unspecified kind must not become a tier")
	}
	if SessionTypeFromProto(sandboxv1.SessionType_SESSION_TYPE_UNSPECIFIED) != "" {
		t.Error("an unspecified session type must stay empty")
	}
	res := ports.CommandResult{ExitCode: 137, Error: "killed", Duration: 1234 * time.Millisecond, TimedOut: true, Signal: 9}
	if got := Result(CommandResult("c", res)); got != res {
		t.Errorf("result %+v -> %+v", res, got)
	}
}
