package filestore

import (
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Tokens keeps the named tokens in one small file, <dir>/tokens.json
// (mode 0600), rewritten atomically on every change and read once at open;
// every request verifies from memory. Only the SHA-256 hashes of the
// secrets are written.
type Tokens struct {
	path   string
	mu     sync.RWMutex
	tokens []ports.Token
	byHash map[[32]byte]int
}

var _ ports.TokenStore = (*Tokens)(nil)

type tokensFile struct {
	Tokens []tokenRecord `json:"tokens"`
}

type tokenRecord struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Role      string            `json:"role"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	ExpiresAt time.Time         `json:"expires_at,omitzero"`
	// SHA256 is the hex sha256 of the secret.
	SHA256 string `json:"sha256"`
}

// NewTokens opens (making its directory) the tokens kept in dir.
func NewTokens(dir string) (*Tokens, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &Tokens{path: filepath.Join(dir, "tokens.json")}
	b, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.index()
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	var f tokensFile
	// A damaged file is refused: starting with none would be safe (every
	// named token refused) but would lose them silently.
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%w: %s does not parse: %v", ports.ErrStoreUnavailable, s.path, err)
	}
	for _, r := range f.Tokens {
		h, err := hex.DecodeString(r.SHA256)
		if err != nil || len(h) != 32 || r.ID == "" || r.Name == "" {
			return nil, fmt.Errorf("%w: %s: a token without id, name or sha256", ports.ErrStoreUnavailable, s.path)
		}
		t := ports.Token{ID: r.ID, Name: r.Name, Role: r.Role, Labels: r.Labels, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt}
		copy(t.Hash[:], h)
		s.tokens = append(s.tokens, t)
	}
	s.index()
	return s, nil
}

func (s *Tokens) index() {
	s.byHash = make(map[[32]byte]int, len(s.tokens))
	for i, t := range s.tokens {
		s.byHash[t.Hash] = i
	}
}

// write writes tokens and only then makes them current: a failed write
// changes nothing. Called with mu held.
func (s *Tokens) write(tokens []ports.Token) error {
	f := tokensFile{Tokens: make([]tokenRecord, 0, len(tokens))}
	for _, t := range tokens {
		f.Tokens = append(f.Tokens, tokenRecord{ID: t.ID, Name: t.Name, Role: t.Role, Labels: t.Labels,
			CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, SHA256: hex.EncodeToString(t.Hash[:])})
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := fsatomic.WriteFile(s.path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("%w: %v", ports.ErrStoreUnavailable, err)
	}
	s.tokens = tokens
	s.index()
	return nil
}

func (s *Tokens) find(ref string) int {
	return slices.IndexFunc(s.tokens, func(t ports.Token) bool { return t.ID == ref || t.Name == ref })
}

func cloneToken(t ports.Token) ports.Token {
	t.Labels = maps.Clone(t.Labels)
	return t
}

// Create implements ports.TokenStore.
func (s *Tokens) Create(t ports.Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.tokens {
		if k.Name == t.Name || k.ID == t.ID || k.Hash == t.Hash {
			return ports.ErrTokenExists
		}
	}
	return s.write(append(slices.Clip(s.tokens), cloneToken(t)))
}

// List implements ports.TokenStore.
func (s *Tokens) List() ([]ports.Token, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]ports.Token, 0, len(s.tokens))
	for _, t := range s.tokens {
		out = append(out, cloneToken(t))
	}
	slices.SortFunc(out, func(a, b ports.Token) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// Get implements ports.TokenStore.
func (s *Tokens) Get(ref string) (ports.Token, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := s.find(ref)
	if i < 0 {
		return ports.Token{}, ports.ErrTokenNotFound
	}
	return cloneToken(s.tokens[i]), nil
}

// Delete implements ports.TokenStore.
func (s *Tokens) Delete(ref string) (ports.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.find(ref)
	if i < 0 {
		return ports.Token{}, ports.ErrTokenNotFound
	}
	t := s.tokens[i]
	if err := s.write(slices.Delete(slices.Clone(s.tokens), i, i+1)); err != nil {
		return ports.Token{}, err
	}
	return t, nil
}

// Verify implements ports.TokenStore. The secret is looked up by its
// hash, so what a lookup's time could tell is about the hash only.
func (s *Tokens) Verify(secret string, now time.Time) (ports.Token, bool) {
	if secret == "" {
		return ports.Token{}, false
	}
	h := ports.HashTokenSecret(secret)
	s.mu.RLock()
	defer s.mu.RUnlock()
	i, ok := s.byHash[h]
	if !ok || s.tokens[i].Expired(now) {
		return ports.Token{}, false
	}
	return cloneToken(s.tokens[i]), true
}
