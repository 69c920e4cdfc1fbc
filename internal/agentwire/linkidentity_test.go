package agentwire

import (
	"bytes"
	"strings"
	"testing"
)

func TestLinkIdentityRoundTrip(t *testing.T) {
	in := LinkIdentity{AgentID: "vm-1", Secret: "s3cret", UnixNano: 1_800_000_000_000_000_000}
	line, err := EncodeLinkIdentity(in)
	if err != nil || !bytes.HasSuffix(line, []byte("\n")) || bytes.Count(line, []byte("\n")) != 1 {
		t.Fatalf("encode: %q, %v", line, err)
	}
	out, err := DecodeLinkIdentity(line)
	if err != nil || out != in {
		t.Fatalf("decode: %+v, %v", out, err)
	}
}

func TestLinkIdentityRefusesBadAnswers(t *testing.T) {
	for _, bad := range []string{
		``, `{}`, `null`, `{"agent_id":"vm-1"}`,
		`{"agent_id":"../etc","secret":"x"}`,
		`{"agent_id":"vm-1","secret":"a\nAGENT_ID=other"}`,
		`{"agent_id":"vm-1","secret":"x","unix_nano":-1}`,
		`{"agent_id":"vm-1","secret":"x","extra":1}`,
		`{"agent_id":"vm-1","secret":"x"} {"agent_id":"vm-2","secret":"y"}`,
		`{"agent_id":"vm-1","secret":"` + strings.Repeat("x", 600) + `"}`,
		`{"agent_id":"vm-1","secret":"x","pad":"` + strings.Repeat("x", MaxLinkIdentityLine) + `"}`,
	} {
		if li, err := DecodeLinkIdentity([]byte(bad)); err == nil {
			t.Errorf("%.80q accepted: %+v", bad, li)
		}
	}
	if _, err := EncodeLinkIdentity(LinkIdentity{AgentID: "vm-1"}); err == nil {
		t.Error("an identity without a secret encoded")
	}
}

func FuzzDecodeLinkIdentity(f *testing.F) {
	f.Add([]byte(`{"agent_id":"vm-1","secret":"x","unix_nano":5}` + "\n"))
	f.Add([]byte(`{"agent_id":"","secret":""}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		li, err := DecodeLinkIdentity(b)
		if err != nil {
			return
		}
		// What decodes is usable, and encodes back to one line that
		// decodes to the same.
		line, err := EncodeLinkIdentity(li)
		if err != nil {
			t.Fatalf("%+v decoded but does not encode: %v", li, err)
		}
		if again, err := DecodeLinkIdentity(line); err != nil || again != li {
			t.Fatalf("round trip: %+v, %v", again, err)
		}
	})
}
