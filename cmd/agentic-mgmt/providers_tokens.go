package main

import (
	"fmt"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
)

// provideTokens is the store of named tokens, tokens.json in the data dir
// (hashes only).
func provideTokens(cfg Config) (*filestore.Tokens, error) {
	s, err := filestore.NewTokens(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("named tokens: %w", err)
	}
	return s, nil
}
