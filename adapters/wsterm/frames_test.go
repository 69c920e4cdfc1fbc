package wsterm

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeClientFrame(t *testing.T) {
	for _, tc := range []struct {
		name, in, code string
	}{
		{"hello", `{"type":"hello"}`, ""},
		{"ping with id", `{"type":"ping","id":"7"}`, ""},
		{"create", `{"type":"create_session","agent_id":"host-01","session_type":"background","name":"dev","command":"npm","args":["run","dev"],"cols":120,"rows":40}`, ""},
		{"create with kind alias", `{"type":"create_session","agent_id":"a","kind":"headless","command":"claude"}`, ""},
		{"create without command", `{"type":"create_session","agent_id":"a"}`, "invalid_frame"},
		{"create with a bad type", `{"type":"create_session","agent_id":"a","command":"x","session_type":"weird"}`, "invalid_frame"},
		{"shell", `{"type":"start_shell","agent_id":"host-01","cols":80,"rows":24}`, ""},
		{"shell too wide", `{"type":"start_shell","agent_id":"host-01","cols":5000,"rows":24}`, "invalid_frame"},
		{"shell without agent", `{"type":"start_shell"}`, "invalid_frame"},
		{"join from 0", `{"type":"join_session","session_id":"s","role":"observer","replay_from":0}`, ""},
		{"join with a bad role", `{"type":"join_session","session_id":"s","role":"boss"}`, "invalid_frame"},
		{"input", `{"type":"input","session_id":"s","data":"ls\r"}`, ""},
		{"input base64", `{"type":"input","session_id":"s","data":"/w==","encoding":"base64"}`, ""},
		{"input bad base64", `{"type":"input","session_id":"s","data":"%%%","encoding":"base64"}`, "invalid_frame"},
		{"input bad encoding", `{"type":"input","session_id":"s","data":"x","encoding":"rot13"}`, "invalid_frame"},
		{"resize", `{"type":"resize","session_id":"s","cols":100,"rows":30}`, ""},
		{"resize without size", `{"type":"resize","session_id":"s"}`, "invalid_frame"},
		{"signal", `{"type":"signal","session_id":"s","signal":"INT"}`, ""},
		{"signal without name", `{"type":"signal","session_id":"s"}`, "invalid_frame"},
		{"kill", `{"type":"kill_session","session_id":"s"}`, ""},
		{"leave without id", `{"type":"leave_session"}`, "invalid_frame"},
		{"unknown type", `{"type":"teleport"}`, "unknown_type"},
		{"no type", `{"session_id":"s"}`, "invalid_frame"},
		{"not json", `hello`, "invalid_json"},
		{"array", `[1,2]`, "invalid_json"},
		{"wrong field type", `{"type":"resize","session_id":"s","cols":"wide","rows":3}`, "invalid_json"},
		{"NUL in a name", `{"type":"start_shell","agent_id":"a\u0000b"}`, "invalid_frame"},
		{"huge field", `{"type":"start_shell","agent_id":"` + strings.Repeat("a", 5000) + `"}`, "invalid_frame"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeClientFrame([]byte(tc.in))
			var fe *ProtocolError
			switch {
			case tc.code == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.code != "" && (!errors.As(err, &fe) || fe.Code != tc.code):
				t.Fatalf("want code %s, got %v", tc.code, err)
			}
		})
	}
	f, _ := DecodeClientFrame([]byte(`{"type":"input","session_id":"s","data":"/w==","encoding":"base64"}`))
	if string(f.Bytes) != "\xff" {
		t.Fatalf("decoded %q", f.Bytes)
	}
	f, _ = DecodeClientFrame([]byte(`{"type":"join_session","session_id":"s","replay_from":0}`))
	if f.ReplayFrom == nil || *f.ReplayFrom != 0 {
		t.Fatal("replay_from 0 lost")
	}
	if _, err := DecodeClientFrame(make([]byte, MaxFrameBytes+1)); err == nil {
		t.Fatal("oversized frame accepted")
	}
}

func TestOutputFrameEncoding(t *testing.T) {
	if f := NewOutputFrame("s", 5, []byte("héllo")); f.Data != "héllo" || f.Encoding != "" || f.Offset != 5 {
		t.Fatalf("text: %+v", f)
	}
	if f := NewOutputFrame("s", 0, []byte{0xff, 'a'}); f.Encoding != EncodingBase64 || f.Data != "/2E=" {
		t.Fatalf("binary: %+v", f)
	}
}

func FuzzDecodeClientFrame(f *testing.F) {
	for _, s := range []string{`{"type":"hello"}`, `{"type":"input","session_id":"s","data":"x"}`, `{"type":"join_session","session_id":"s","replay_from":3}`, `{`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		fr, err := DecodeClientFrame(raw)
		if err != nil {
			var fe *ProtocolError
			if !errors.As(err, &fe) || fe.Code == "" {
				t.Fatalf("error without a code: %v", err)
			}
			ef := NewErrorFrame("", err)
			if b, jerr := json.Marshal(ef); jerr != nil || !utf8.Valid(b) {
				t.Fatalf("error frame does not encode: %v", jerr)
			}
			return
		}
		if fr.Type == "" {
			t.Fatal("accepted a frame without a type")
		}
	})
}
