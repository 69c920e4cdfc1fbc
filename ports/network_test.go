package ports

import (
	"encoding/json"
	"errors"
	"testing"
)

// The modes' words are the contract: the API, task manifests and
// AGENTIC_ALLOWED_NETWORKS spell them exactly so.
func TestParseNetworkMode(t *testing.T) {
	for in, want := range map[string]NetworkMode{
		"none": NetworkNone, "proxy": NetworkProxy, "user": NetworkUser, "bridge": NetworkBridge, "host": NetworkHost,
	} {
		got, err := ParseNetworkMode(in)
		if err != nil || got != want || !got.Valid() {
			t.Errorf("ParseNetworkMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if len(KnownNetworkModes) != 5 {
		t.Errorf("KnownNetworkModes %v: a mode added without its line above", KnownNetworkModes)
	}
	for _, in := range []string{"", "None", "carrier-pigeon", " none", "none,proxy"} {
		if got, err := ParseNetworkMode(in); !errors.Is(err, ErrInvalidSpec) || got != "" {
			t.Errorf("ParseNetworkMode(%q) = %q, %v; want ErrInvalidSpec", in, got, err)
		}
		if NetworkMode(in).Valid() {
			t.Errorf("%q valid", in)
		}
	}
}

func TestNetworkModeJSONIsItsWord(t *testing.T) {
	b, err := json.Marshal(PoolSpec{Network: NetworkProxy})
	if err != nil || string(b) != `{"resources":{"CPUs":0,"MemoryMB":0,"PIDs":0,"DiskGB":0},"network":"proxy"}` {
		t.Fatalf("PoolSpec JSON = %s, %v", b, err)
	}
}
