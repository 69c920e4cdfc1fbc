package filestore

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
	"github.com/agentic-sandbox/agentic-sandbox/ports/portstest"
)

func TestTokenStoreConformance(t *testing.T) {
	portstest.RunTokenStoreSuite(t, inDir[ports.TokenStore](NewTokens))
}

// The file holds hashes, never a secret, and only its owner reads it.
func TestTokensFileHoldsOnlyHashes(t *testing.T) {
	dir := t.TempDir()
	s, err := NewTokens(dir)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "ast_the-secret-that-must-not-be-written"
	if err := s.Create(ports.Token{ID: "tok_0000000000000001", Name: "ci", Role: "viewer", CreatedAt: time.Now(), Hash: ports.HashTokenSecret(secret)}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tokens.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), secret) || strings.Contains(string(b), "the-secret") {
		t.Fatalf("tokens.json holds the secret:\n%s", b)
	}
	var f tokensFile
	if err := json.Unmarshal(b, &f); err != nil || len(f.Tokens) != 1 || len(f.Tokens[0].SHA256) != 64 {
		t.Fatalf("tokens.json = %s (%v)", b, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("tokens.json mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestADamagedTokensFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokens.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewTokens(dir); err == nil {
		t.Fatal("a damaged tokens.json opened")
	}
}
