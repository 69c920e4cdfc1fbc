package portsfake

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Tokens is a fake ports.TokenStore in memory. Reopen gives a new store
// over what it keeps (as after a restart).
type Tokens struct {
	kept *keptTokens
}

type keptTokens struct {
	mu     sync.Mutex
	tokens []ports.Token
}

var _ ports.TokenStore = (*Tokens)(nil)

// NewTokens returns an empty store.
func NewTokens() *Tokens { return &Tokens{kept: &keptTokens{}} }

// Reopen returns a store over the same tokens.
func (s *Tokens) Reopen() *Tokens { return &Tokens{kept: s.kept} }

func cloneToken(t ports.Token) ports.Token {
	t.Labels = maps.Clone(t.Labels)
	return t
}

func (s *Tokens) find(ref string) int {
	return slices.IndexFunc(s.kept.tokens, func(t ports.Token) bool { return t.ID == ref || t.Name == ref })
}

// Create implements ports.TokenStore.
func (s *Tokens) Create(t ports.Token) error {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	for _, k := range s.kept.tokens {
		if k.Name == t.Name || k.ID == t.ID || k.Hash == t.Hash {
			return ports.ErrTokenExists
		}
	}
	s.kept.tokens = append(s.kept.tokens, cloneToken(t))
	return nil
}

// List implements ports.TokenStore.
func (s *Tokens) List() ([]ports.Token, error) {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	out := make([]ports.Token, 0, len(s.kept.tokens))
	for _, t := range s.kept.tokens {
		out = append(out, cloneToken(t))
	}
	slices.SortFunc(out, func(a, b ports.Token) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// Get implements ports.TokenStore.
func (s *Tokens) Get(ref string) (ports.Token, error) {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	i := s.find(ref)
	if i < 0 {
		return ports.Token{}, ports.ErrTokenNotFound
	}
	return cloneToken(s.kept.tokens[i]), nil
}

// Delete implements ports.TokenStore.
func (s *Tokens) Delete(ref string) (ports.Token, error) {
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	i := s.find(ref)
	if i < 0 {
		return ports.Token{}, ports.ErrTokenNotFound
	}
	t := s.kept.tokens[i]
	s.kept.tokens = slices.Delete(s.kept.tokens, i, i+1)
	return t, nil
}

// Verify implements ports.TokenStore.
func (s *Tokens) Verify(secret string, now time.Time) (ports.Token, bool) {
	h := ports.HashTokenSecret(secret)
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	for _, t := range s.kept.tokens {
		if t.Hash == h {
			if t.Expired(now) {
				return ports.Token{}, false
			}
			return cloneToken(t), true
		}
	}
	return ports.Token{}, false
}
