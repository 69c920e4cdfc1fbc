package ports

import "time"

// MaxSignInSessions bounds the sign-in sessions a store keeps: past it, the
// oldest (by Created) are dropped to make room for a new one.
const MaxSignInSessions = 10_000

// SignInSession is one dashboard sign-in, kept on the server. The cookie
// holds a random id; a store keeps only its hash (IDHash), never the id.
type SignInSession struct {
	// IDHash is the SHA-256 of the cookie's id, lower-case hex.
	IDHash string
	// TokenID names the token the session stands for ("operator": the
	// operator token).
	TokenID string
	// Binding ties the session to that token's secret (an HMAC keyed by
	// the session's id, so it says nothing of the secret without the
	// cookie): a session whose token has another secret now is no longer
	// valid.
	Binding string
	// Created and Expires bound the session; it is valid while now is
	// before Expires.
	Created, Expires time.Time
}

// SignInSessions keeps the dashboard's sign-in sessions across restarts of
// the server. Expired sessions are dropped on every write, and a store
// holds at most MaxSignInSessions.
type SignInSessions interface {
	// Create keeps s (replacing one with the same IDHash).
	Create(s SignInSession) error
	// Lookup returns the session of idHash that is live at now.
	Lookup(idHash string, now time.Time) (SignInSession, bool)
	// Delete ends one session; ending none is not an error.
	Delete(idHash string) error
	// DeleteForToken ends every session of tokenID (it was revoked).
	DeleteForToken(tokenID string) error
	// DeleteAll ends every session.
	DeleteAll() error
}
