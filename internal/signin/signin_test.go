package signin

import (
	"net/http/httptest"
	"testing"
	"time"
)

func TestSessionCookie(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	v := Value("tok", now.Add(TTL))
	if !Valid("tok", v, now) || !Valid("tok", v, now.Add(TTL-time.Second)) {
		t.Fatal("a fresh session is not valid")
	}
	for name, bad := range map[string]bool{
		"expired":        Valid("tok", v, now.Add(TTL)),
		"another token":  Valid("other", v, now),
		"no token":       Valid("", v, now),
		"expiry changed": Valid("tok", "9999999999"+v[10:], now),
		"mac changed":    Valid("tok", v[:len(v)-2]+"AA", now),
		"empty":          Valid("tok", "", now),
		"no dot":         Valid("tok", "123", now),
		"not a number":   Valid("tok", "x."+mac("tok", "x"), now),
		"absurdly long":  Valid("tok", v+string(make([]byte, 200)), now),
	} {
		if bad {
			t.Errorf("%s: accepted", name)
		}
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.AddCookie(Cookie(v, now.Add(TTL), false))
	if !FromRequest(r, "tok", now) || FromRequest(httptest.NewRequest("GET", "/", nil), "tok", now) {
		t.Fatal("FromRequest")
	}
	if c := Cookie(v, now, true); !c.HttpOnly || !c.Secure || c.SameSite != 3 || c.Path != "/" {
		t.Fatalf("cookie %+v", c)
	}
	if c := Cookie("", time.Time{}, false); c.MaxAge != -1 {
		t.Fatalf("clearing cookie %+v", c)
	}
}

func FuzzValid(f *testing.F) {
	f.Add("1800000000.abc")
	f.Fuzz(func(t *testing.T, v string) {
		_ = Valid("tok", v, time.Unix(1_700_000_000, 0))
	})
}
