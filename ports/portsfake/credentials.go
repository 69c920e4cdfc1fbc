package portsfake

import (
	"fmt"
	"sync"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Credentials is an in-memory ports.AgentCredentials for tests of what
// uses one (the file store is tested on its own). It keeps secrets in the
// clear, so tests can look.
type Credentials struct {
	mu      sync.Mutex
	secrets map[string]string
	kinds   map[string]ports.RuntimeKind
	puts    int
	err     error
}

// NewCredentials returns an empty store.
func NewCredentials() *Credentials {
	return &Credentials{secrets: map[string]string{}, kinds: map[string]ports.RuntimeKind{}}
}

// Verify implements ports.AgentCredentials; it fails with the error SetErr gave.
func (c *Credentials) Verify(id, secret string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return false, c.err
	}
	s, ok := c.secrets[id]
	return ok && secret != "" && s == secret, nil
}

// Put implements ports.AgentCredentials.
func (c *Credentials) Put(id, secret string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.secrets[id] = secret
	c.puts++
	return nil
}

// Create implements ports.AgentCredentials.
func (c *Credentials) Create(id, secret string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.secrets[id]; ok {
		return fmt.Errorf("%w: %q", ports.ErrCredentialExists, id)
	}
	c.secrets[id] = secret
	return nil
}

// Delete implements ports.AgentCredentials.
func (c *Credentials) Delete(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.secrets, id)
	delete(c.kinds, id)
	return nil
}

// PinKind implements ports.AgentCredentials.
func (c *Credentials) PinKind(id string, kind ports.RuntimeKind) (ports.RuntimeKind, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k, ok := c.kinds[id]; ok {
		return k, nil
	}
	c.kinds[id] = kind
	return kind, nil
}

// Secret is the secret stored for id.
func (c *Credentials) Secret(id string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.secrets[id]
	return s, ok
}

// Kind is the kind pinned for id.
func (c *Credentials) Kind(id string) (ports.RuntimeKind, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.kinds[id]
	return k, ok
}

// Len is how many credentials are stored.
func (c *Credentials) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.secrets)
}

// Puts counts the calls of Put.
func (c *Credentials) Puts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.puts
}

// SetErr makes Verify fail with err (nil: work again).
func (c *Credentials) SetErr(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

// Reopen returns the store itself: it has no Close, so what it keeps is
// what a store opened again finds.
func (c *Credentials) Reopen() *Credentials { return c }
