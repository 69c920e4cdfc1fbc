package main

import (
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portsfake"
)

// The previews' scope of a dashboard session: the operator's reaches every
// agent, a scoped token's only the agents of its environments (never a
// host agent), an unscoped token's every agent, a revoked token's none.
func TestSessionMayReach(t *testing.T) {
	tokens := portsfake.NewTokens()
	for _, tk := range []ports.Token{
		{ID: "tok_pay", Name: "pay", Role: "operator", Hash: [32]byte{1}, Labels: map[string]string{"team": "payments"}},
		{ID: "tok_all", Name: "all", Role: "operator", Hash: [32]byte{2}},
	} {
		if err := tokens.Create(tk); err != nil {
			t.Fatal(err)
		}
	}
	envs := map[string]environment.Environment{
		"pay-env":    {Name: "pay-env", Labels: map[string]string{"team": "payments"}},
		"search-env": {Name: "search-env", Labels: map[string]string{"team": "search"}},
	}
	may := sessionMayReach(tokens, func(n string) (environment.Environment, bool) { e, ok := envs[n]; return e, ok })
	for _, c := range []struct {
		token, agent string
		want         bool
	}{
		{signin.OperatorTokenID, "search-env", true},
		{signin.OperatorTokenID, "host-01", true},
		{"tok_pay", "pay-env", true},
		{"tok_pay", "search-env", false},
		{"tok_pay", "host-01", false},
		{"tok_all", "search-env", true},
		{"tok_all", "host-01", true},
		{"tok_gone", "pay-env", false},
	} {
		if got := may(c.token, c.agent); got != c.want {
			t.Errorf("%s → %s: %v, want %v", c.token, c.agent, got, c.want)
		}
	}
}
