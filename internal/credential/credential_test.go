package credential

import (
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/core/access"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

func TestVerifier(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store := portsfake.NewTokens()
	for _, tk := range []ports.Token{
		{ID: "tok_1", Name: "ci", Role: access.Viewer, Labels: map[string]string{"team": "a"}, Hash: ports.HashTokenSecret("ast_v"), CreatedAt: now},
		{ID: "tok_2", Name: "old", Role: access.Operator, Hash: ports.HashTokenSecret("ast_old"), CreatedAt: now, ExpiresAt: now.Add(time.Minute)},
	} {
		if err := store.Create(tk); err != nil {
			t.Fatal(err)
		}
	}
	v := NewVerifier("op-secret", store)
	if c, ok := v.Secret("op-secret", now); !ok || c.Role != access.Admin || c.TokenID != "" {
		t.Fatalf("operator token: %+v %v", c, ok)
	}
	if c, ok := v.Secret("ast_v", now); !ok || c.Name != "ci" || c.Role != access.Viewer || c.TokenID != "tok_1" || c.Labels["team"] != "a" {
		t.Fatalf("named token: %+v %v", c, ok)
	}
	if c, ok := v.Secret("ast_old", now); !ok || !c.Expires.Equal(now.Add(time.Minute)) {
		t.Fatalf("a token with expires_at: %+v %v", c, ok)
	}
	for _, bad := range []string{"", "nope", "op-secre"} {
		if _, ok := v.Secret(bad, now); ok {
			t.Fatalf("%q accepted", bad)
		}
	}
	if _, ok := v.Secret("ast_old", now.Add(time.Minute)); ok {
		t.Fatal("an expired token accepted")
	}
	if _, ok := NewVerifier("", nil).Secret("", now); ok {
		t.Fatal("no operator token: the empty secret accepted")
	}

	// Sessions: the operator's is the dashboard; a named token's takes
	// its role and the sooner end.
	if c, ok := v.Session(ports.SignInSession{TokenID: OperatorTokenID, Expires: now.Add(time.Hour)}, now); !ok || c.Name != "dashboard" || c.Role != access.Admin || c.TokenID != "" || !c.Expires.IsZero() || !c.Until(now.Add(time.Hour)).Equal(now.Add(time.Hour)) {
		t.Fatalf("operator session: %+v %v", c, ok)
	}
	if c, ok := v.Session(ports.SignInSession{TokenID: "tok_2", Expires: now.Add(time.Hour)}, now); !ok || c.Role != access.Operator || !c.Expires.Equal(now.Add(time.Minute)) || !c.Until(now.Add(time.Hour)).Equal(now.Add(time.Minute)) {
		t.Fatalf("session of a token expiring first: %+v %v", c, ok)
	}
	if c, ok := v.Session(ports.SignInSession{TokenID: "tok_1", Expires: now.Add(time.Hour)}, now); !ok || c.Name != "ci" || !c.Expires.IsZero() || !c.Until(now.Add(time.Hour)).Equal(now.Add(time.Hour)) {
		t.Fatalf("session of a token without expiry: %+v %v", c, ok)
	}
	if _, ok := v.Session(ports.SignInSession{TokenID: "tok_2", Expires: now.Add(time.Hour)}, now.Add(2*time.Minute)); ok {
		t.Fatal("session of an expired token accepted")
	}
	if _, err := store.Delete("tok_1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := v.Session(ports.SignInSession{TokenID: "tok_1", Expires: now.Add(time.Hour)}, now); ok {
		t.Fatal("session of a revoked token accepted")
	}
	if _, ok := v.Session(ports.SignInSession{TokenID: "ci", Expires: now.Add(time.Hour)}, now); ok {
		t.Fatal("a session's token id matched a name")
	}
}

func TestWatchers(t *testing.T) {
	ws := NewWatchers()
	now := time.Now()
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	a, stopA := ws.Watch("tok_a", "", time.Time{}, now)
	b, stopB := ws.Watch("tok_b", "sess1", time.Time{}, now)
	c, stopC := ws.Watch("tok_b", "sess2", time.Time{}, now)
	defer stopA()
	defer stopB()
	defer stopC()
	ws.EndKey("sess1")
	if !closed(b) || closed(c) || closed(a) {
		t.Fatal("EndKey ended the wrong watches")
	}
	ws.EndToken("tok_b")
	if !closed(c) || closed(a) {
		t.Fatal("EndToken ended the wrong watches")
	}
	ws.EndToken("")
	ws.EndKey("")
	if closed(a) {
		t.Fatal("an empty id ended a watch")
	}
	// Expiry, from the caller's now.
	e, stopE := ws.Watch("tok_e", "", now.Add(50*time.Millisecond), now)
	defer stopE()
	testkit.Receive(t, 15*time.Second, e, "the watch's expiry")
	// Released watches are forgotten; a nil set only expires.
	n := ws.Watching()
	stopA()
	if ws.Watching() != n-1 {
		t.Fatalf("stop left the watch: %d then %d", n, ws.Watching())
	}
	var none *Watchers
	f, stopF := none.Watch("x", "y", now.Add(time.Millisecond), now)
	defer stopF()
	none.EndToken("x")
	testkit.Receive(t, 15*time.Second, f, "a nil set's expiry")
}
