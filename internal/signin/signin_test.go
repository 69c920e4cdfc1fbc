package signin

import (
	"crypto/sha256"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

func TestSessionCookie(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	store := portsfake.NewSignInSessions()
	store.Now = func() time.Time { return now }
	s := NewSessions(store, "tok")
	v, exp, err := s.Mint(OperatorTokenID, now)
	if err != nil {
		t.Fatal(err)
	}
	if !exp.Equal(now.Add(TTL)) || len(v) != 43 || strings.Contains(v, "tok") {
		t.Fatalf("value %q expires %v", v, exp)
	}
	ss, ok := s.Lookup(v, now)
	if !ok || ss.TokenID != OperatorTokenID || !ss.Expires.Equal(exp) {
		t.Fatalf("a fresh session: %+v %v", ss, ok)
	}
	if _, ok := s.Lookup(v, now.Add(TTL-time.Second)); !ok {
		t.Fatal("a session before its end is not valid")
	}
	// The store holds the id's hash, and nothing that reveals the id or the token.
	b, _ := json.Marshal(ss)
	if strings.Contains(string(b), v) || ss.IDHash == "" {
		t.Fatalf("the store holds the id: %s", b)
	}
	v2, _, err := s.Mint(OperatorTokenID, now)
	if err != nil || v2 == v {
		t.Fatalf("a second session: %q %v", v2, err)
	}
	other := NewSessions(store.Reopen(), "another token")
	for name, bad := range map[string]bool{
		"expired":       lookup(s, v, now.Add(TTL)),
		"another token": lookup(other, v, now),
		"no token":      lookup(NewSessions(store, ""), v, now),
		"nil sessions":  lookup(nil, v, now),
		"changed":       lookup(s, v[:len(v)-2]+"AA", now),
		"empty":         lookup(s, "", now),
		"not base64":    lookup(s, strings.Repeat("!", 43), now),
		"absurdly long": lookup(s, v+strings.Repeat("A", 200), now),
	} {
		if bad {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, _, err := NewSessions(store, "").Mint(OperatorTokenID, now); err == nil {
		t.Error("minted a session without an operator token")
	}
	if _, _, err := s.Mint("tok-1", now); err == nil {
		t.Error("minted a session of an unknown token")
	}
	// Sign-out ends one session at once, not the others.
	if err := s.End(v); err != nil {
		t.Fatal(err)
	}
	if lookup(s, v, now) || !lookup(s, v2, now) {
		t.Fatal("End ended the wrong sessions")
	}
	if err := s.End("junk"); err != nil {
		t.Fatalf("ending junk: %v", err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.AddCookie(Cookie("junk", now.Add(TTL), false)) // another page's cookie of the same name must not hide the real one
	r.AddCookie(Cookie(v2, now.Add(TTL), false))
	if _, ok := s.FromRequest(r, now); !ok {
		t.Fatal("FromRequest")
	}
	if _, ok := s.FromRequest(httptest.NewRequest("GET", "/", nil), now); ok {
		t.Fatal("FromRequest without a cookie")
	}
	if c := Cookie(v, now, true); !c.HttpOnly || !c.Secure || c.SameSite != 3 || c.Path != "/" {
		t.Fatalf("cookie %+v", c)
	}
	if c := Cookie("", time.Time{}, false); c.MaxAge != -1 {
		t.Fatalf("clearing cookie %+v", c)
	}
}

// TestSessionsOfOtherTokens: a named token's sessions end when the token
// goes (its hash is no longer known) or EndForToken ends them.
func TestSessionsOfOtherTokens(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	store := portsfake.NewSignInSessions()
	store.Now = func() time.Time { return now }
	live := map[string][32]byte{"tok-1": sha256.Sum256([]byte("secret-1")), "tok-2": sha256.Sum256([]byte("secret-2"))}
	s := NewSessions(store, "op").WithTokens(func(id string) ([32]byte, bool) { h, ok := live[id]; return h, ok })
	v1, _, err := s.Mint("tok-1", now)
	if err != nil {
		t.Fatal(err)
	}
	v2, _, _ := s.Mint("tok-2", now)
	vop, _, _ := s.Mint(OperatorTokenID, now)
	if !lookup(s, v1, now) || !lookup(s, v2, now) || !lookup(s, vop, now) {
		t.Fatal("fresh sessions")
	}
	delete(live, "tok-1")
	if lookup(s, v1, now) || !lookup(s, v2, now) {
		t.Fatal("a gone token's session lives on")
	}
	if err := s.EndForToken("tok-2"); err != nil || lookup(s, v2, now) || !lookup(s, vop, now) {
		t.Fatalf("EndForToken: %v", err)
	}
}

// TestEnded: a connection's watch of its session fires on End, on
// EndForToken and at expiry, and not for another session.
func TestEnded(t *testing.T) {
	store := portsfake.NewSignInSessions()
	s := NewSessions(store, "tok")
	now := time.Now()
	v1, _, _ := s.Mint(OperatorTokenID, now)
	v2, _, _ := s.Mint(OperatorTokenID, now)
	ss1, _ := s.Lookup(v1, now)
	ss2, _ := s.Lookup(v2, now)
	e1, stop1 := s.Ended(ss1, now)
	defer stop1()
	e2, stop2 := s.Ended(ss2, now)
	defer stop2()
	if err := s.End(v1); err != nil {
		t.Fatal(err)
	}
	testkit.Receive(t, 15*time.Second, e1, "the watch of an ended session")
	select {
	case <-e2:
		t.Fatal("another session's watch fired")
	default:
	}
	if err := s.EndForToken(OperatorTokenID); err != nil {
		t.Fatal(err)
	}
	testkit.Receive(t, 15*time.Second, e2, "the watch of a session of a revoked token")
	expired := ss2
	e3, stop3 := s.Ended(expired, expired.Expires)
	defer stop3()
	testkit.Receive(t, 15*time.Second, e3, "the watch of an expired session")
	if ch, stop := (*Sessions)(nil).Ended(ss1, now); ch != nil {
		t.Fatal("a nil Sessions' watch")
	} else {
		stop()
	}
}

func lookup(s *Sessions, v string, now time.Time) bool {
	_, ok := s.Lookup(v, now)
	return ok
}

func FuzzLookup(f *testing.F) {
	s := NewSessions(portsfake.NewSignInSessions(), "tok")
	f.Add("1800000000.abc")
	f.Fuzz(func(t *testing.T, v string) {
		if lookup(s, v, time.Unix(1_700_000_000, 0)) {
			t.Fatalf("%q accepted by a store with no session", v)
		}
	})
}

// TestLimiter: five failures within a minute from one address refuse the
// sixth until the oldest is a minute old; other addresses are not touched;
// a success forgets only its own address; the memory is bounded.
func TestLimiter(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := NewLimiter()
	for i := range MaxFailures {
		if ok, _ := l.Allow("10.0.0.1", now); !ok {
			t.Fatalf("attempt %d refused", i+1)
		}
		l.Failed("10.0.0.1", now.Add(time.Duration(i)*time.Second))
	}
	now = now.Add(10 * time.Second)
	ok, after := l.Allow("10.0.0.1", now)
	if ok || after != 50*time.Second {
		t.Fatalf("the sixth: %v, retry after %v; want refused, 50s", ok, after)
	}
	if ok, _ := l.Allow("10.0.0.2", now); !ok {
		t.Fatal("another address refused")
	}
	l.Failed("10.0.0.2", now)
	l.Succeeded("10.0.0.2")
	if ok, _ := l.Allow("10.0.0.1", now); ok {
		t.Fatal("a success of another address reset this one")
	}
	if ok, _ := l.Allow("10.0.0.1", now.Add(49*time.Second)); ok {
		t.Fatal("allowed before the oldest failure is a minute old")
	}
	if ok, _ := l.Allow("10.0.0.1", now.Add(50*time.Second)); !ok {
		t.Fatal("still refused once the oldest failure is a minute old")
	}
	l.Succeeded("10.0.0.1")
	if ok, _ := l.Allow("10.0.0.1", now); !ok {
		t.Fatal("a success did not forget the address's failures")
	}
	// Bounded: the least recently failed address is forgotten.
	l = NewLimiter()
	l.max = 3
	for _, k := range []string{"a", "a", "a", "a", "a", "b", "c", "d"} {
		l.Failed(k, now)
	}
	if ok, _ := l.Allow("a", now); !ok || len(l.byKey) != 3 || l.lru.Len() != 3 {
		t.Fatalf("bound: a allowed %v, %d keys", ok, len(l.byKey))
	}
}

func TestClientKey(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:5555":             "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:1":   "2001:db8:1:2::/64",
		"[::ffff:192.0.2.7]:80":      "192.0.2.7",
		"@":                          "@",
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = addr
		if got := ClientKey(r); got != want {
			t.Errorf("ClientKey(%q) = %q, want %q", addr, got, want)
		}
	}
}

// A session of a named token (TokenHashes over the token store) lives while
// the token does: revoked or expired, its cookie no longer reads; and
// MintUntil ends it with the token's expiry at the latest.
func TestSessionsOfNamedTokens(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	store := portsfake.NewSignInSessions()
	store.Now = func() time.Time { return now }
	tokens := portsfake.NewTokens()
	until := now.Add(time.Hour)
	for _, tk := range []ports.Token{
		{ID: "tok_0000000000000001", Name: "alice", Role: "viewer", Hash: ports.HashTokenSecret("ast_a")},
		{ID: "tok_0000000000000002", Name: "bob", Role: "operator", Hash: ports.HashTokenSecret("ast_b"), ExpiresAt: until},
	} {
		if err := tokens.Create(tk); err != nil {
			t.Fatal(err)
		}
	}
	s := NewSessions(store, "tok").WithTokens(TokenHashes(tokens, func() time.Time { return now }))
	a, exp, err := s.MintUntil("tok_0000000000000001", now, time.Time{})
	if err != nil || !exp.Equal(now.Add(TTL)) {
		t.Fatalf("alice's session: %v %v", exp, err)
	}
	b, exp, err := s.MintUntil("tok_0000000000000002", now, until)
	if err != nil || !exp.Equal(until) {
		t.Fatalf("bob's session ends %v (%v), want with his token at %v", exp, err, until)
	}
	if _, _, err := s.Mint("alice", now); err == nil {
		t.Error("a session minted for a token's name, not its id")
	}
	if _, _, err := s.Mint("tok_ffffffffffffffff", now); err == nil {
		t.Error("a session minted for no token")
	}
	if ss, ok := s.Lookup(a, now); !ok || ss.TokenID != "tok_0000000000000001" {
		t.Fatalf("alice's session: %+v %v", ss, ok)
	}
	if _, err := tokens.Delete("alice"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lookup(a, now); ok {
		t.Error("the session of a revoked token still reads")
	}
	if _, ok := s.Lookup(b, now.Add(time.Hour-time.Second)); !ok {
		t.Error("bob's session before his token expires")
	}
	now = until
	if _, ok := s.Lookup(b, now); ok {
		t.Error("the session of an expired token still reads")
	}
	// The operator token's sessions are as before.
	if _, _, err := s.Mint(OperatorTokenID, now); err != nil {
		t.Errorf("the operator token's session: %v", err)
	}
}
