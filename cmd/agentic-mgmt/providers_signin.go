package main

import (
	"fmt"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/internal/credential"
	"github.com/agentic-sandbox/agentic-sandbox/internal/signin"
)

// provideSignIns are the dashboard's sign-in sessions, kept in
// <data dir>/signin-sessions.json so that a restart keeps browsers signed
// in; sessions of another operator token than this one are not valid, nor
// those of a named token revoked or expired since. What they opened is
// watched with the named tokens' connections (watch).
func provideSignIns(dir DataDir, token OperatorToken, tokens *filestore.Tokens, clk clock.Wall, watch *credential.Watchers) (*signin.Sessions, error) {
	s, err := filestore.NewSignInSessions(string(dir))
	if err != nil {
		return nil, fmt.Errorf("sign-in sessions: %w", err)
	}
	return signin.NewSessions(s, string(token)).WithTokens(signin.TokenHashes(tokens, clk.Now)).WithWatchers(watch), nil
}
