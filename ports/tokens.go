package ports

import (
	"crypto/sha256"
	"errors"
	"time"
)

// Token is a named bearer token with a role (core/access) and a label
// scope. Only the SHA-256 hash of its secret is kept: the secret is shown
// once, when the token is created.
type Token struct {
	// ID is "tok_" and 16 hex digits; Name is unique too. Either names
	// the token in Get and Delete.
	ID, Name string
	Role     string
	// Labels is the token's scope (empty: everything).
	Labels    map[string]string
	CreatedAt time.Time
	// ExpiresAt is when it stops working (zero: never).
	ExpiresAt time.Time
	// Hash is sha256 of the secret.
	Hash [32]byte
}

// Expired tells whether the token no longer works at now.
func (t Token) Expired(now time.Time) bool {
	return !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt)
}

// HashTokenSecret is the hash a TokenStore keeps of a secret.
func HashTokenSecret(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

// Errors of a TokenStore (besides ErrStoreUnavailable when it cannot
// persist).
var (
	// ErrTokenExists: a token with that name (or id, or hash) is kept.
	ErrTokenExists = errors.New("token exists")
	// ErrTokenNotFound: no token has that id or name.
	ErrTokenNotFound = errors.New("token not found")
)

// TokenStore keeps the named tokens; it outlives a restart.
type TokenStore interface {
	// Create keeps t (ErrTokenExists when its name, id or hash is taken).
	Create(t Token) error
	// List returns every token, expired ones too, ordered by name.
	List() ([]Token, error)
	// Get returns the token whose id or name is ref (ErrTokenNotFound).
	Get(ref string) (Token, error)
	// Delete forgets the token whose id or name is ref and returns it
	// (ErrTokenNotFound); it is refused by Verify from then on.
	Delete(ref string) (Token, error)
	// Verify returns the token whose secret this is, if one is kept and
	// has not expired at now.
	Verify(secret string, now time.Time) (Token, bool)
}
