package ports

import (
	"testing"
	"time"
)

func TestWorkingAndConnected(t *testing.T) {
	for s, want := range map[AgentStatus][2]bool{
		AgentStarting: {false, true}, AgentReady: {true, true}, AgentBusy: {true, true},
		AgentStale: {false, false}, AgentDisconnected: {false, false}, "": {false, false},
	} {
		if got := [2]bool{s.Working(), s.Connected()}; got != want {
			t.Errorf("%q: working, connected = %v, want %v", s, got, want)
		}
	}
}

func TestFormatTimestamp(t *testing.T) {
	at := time.Date(2026, 5, 9, 9, 13, 22, 120_999_999, time.FixedZone("CEST", 2*3600))
	if got := FormatTimestamp(at); got != "2026-05-09T07:13:22.120Z" {
		t.Fatalf("FormatTimestamp = %q: want UTC, exactly three digits, truncated", got)
	}
	if got := FormatTimestamp(time.Date(2026, 5, 9, 7, 0, 0, 0, time.UTC)); got != "2026-05-09T07:00:00.000Z" {
		t.Fatalf("trailing zeros dropped: %q", got)
	}
}

func TestKindsAndTypes(t *testing.T) {
	for _, k := range []RuntimeKind{KindHost, KindContainer, KindVM} {
		if !k.Valid() {
			t.Errorf("%q not valid", k)
		}
	}
	for _, bad := range []RuntimeKind{"", "docker", "VM"} {
		if bad.Valid() {
			t.Errorf("%q valid", bad)
		}
	}
	for _, typ := range []SessionType{SessionInteractive, SessionHeadless, SessionBackground} {
		if !typ.Valid() {
			t.Errorf("%q not valid", typ)
		}
	}
	if SessionType("shell").Valid() || SessionType("").Valid() {
		t.Error("an unknown session type is valid")
	}
}
