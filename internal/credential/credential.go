// Package credential is what the REST API and the client WebSocket share
// about who a request or a connection is from: the operator token or a
// named token (ports.TokenStore), or a dashboard sign-in session standing
// for one of them (Verifier), and when a connection opened with it must
// close because the token was revoked or expired (Watchers).
package credential

import (
	"crypto/sha256"
	"crypto/subtle"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// OperatorTokenID names the operator token where a token id is asked for
// (a dashboard session's TokenID: signin.OperatorTokenID).
const OperatorTokenID = "operator"

// Caller is who sent a request or opened a connection.
type Caller struct {
	// Name is the named token's name, "operator" for the operator token,
	// "dashboard" for a dashboard session signed in with it.
	Name string
	Role string
	// TokenID is the named token's id (empty for the operator token).
	TokenID string
	// Labels is the token's label scope (empty: everything).
	Labels map[string]string
	// Expires is when the token stops working (zero: never).
	Expires time.Time
}

// Until is when a connection opened by c with a sign-in session ending
// at sessionEnd (zero: none) must close: the sooner of the two ends.
func (c Caller) Until(sessionEnd time.Time) time.Time {
	if c.Expires.IsZero() || (!sessionEnd.IsZero() && sessionEnd.Before(c.Expires)) {
		return sessionEnd
	}
	return c.Expires
}

// admin is core/access.Admin (internal/ sits below core: the test checks
// they agree).
const admin = "admin"

// Operator is the server's operator token: the first admin.
var Operator = Caller{Name: OperatorTokenID, Role: admin}

// Dashboard is a dashboard page signed in with the operator token.
var Dashboard = Caller{Name: "dashboard", Role: admin}

// Verifier authenticates secrets: the operator token (compared in
// constant time) and the named tokens of a store.
type Verifier struct {
	opHash [32]byte
	hasOp  bool
	tokens ports.TokenStore
}

// NewVerifier knows operatorToken (empty: none is accepted) and the
// tokens of store (nil: none).
func NewVerifier(operatorToken string, store ports.TokenStore) *Verifier {
	return &Verifier{opHash: sha256.Sum256([]byte(operatorToken)), hasOp: operatorToken != "", tokens: store}
}

// Secret returns the caller whose token is secret: the operator token is
// an admin, a named token has its role, scope and expiry; a revoked or
// expired one, or an unknown one, is refused.
func (v *Verifier) Secret(secret string, now time.Time) (Caller, bool) {
	if secret == "" {
		return Caller{}, false
	}
	if v.hasOp {
		got := sha256.Sum256([]byte(secret))
		if subtle.ConstantTimeCompare(got[:], v.opHash[:]) == 1 {
			return Operator, true
		}
	}
	if v.tokens == nil {
		return Caller{}, false
	}
	t, ok := v.tokens.Verify(secret, now)
	if !ok {
		return Caller{}, false
	}
	return FromToken(t), true
}

// FromToken is the caller of a named token.
func FromToken(t ports.Token) Caller {
	return Caller{Name: t.Name, Role: t.Role, TokenID: t.ID, Labels: t.Labels, Expires: t.ExpiresAt}
}

// Session returns the caller a live dashboard session stands for: the
// operator token's (Dashboard), or the named token whose id it holds,
// while that token is valid. Expires is the token's (the session ends at
// ss.Expires, or sooner with it: Until).
func (v *Verifier) Session(ss ports.SignInSession, now time.Time) (Caller, bool) {
	var c Caller
	if ss.TokenID == OperatorTokenID {
		c = Dashboard
	} else {
		if v.tokens == nil {
			return Caller{}, false
		}
		t, err := v.tokens.Get(ss.TokenID)
		if err != nil || t.ID != ss.TokenID || t.Expired(now) {
			return Caller{}, false
		}
		c = FromToken(t)
	}
	return c, true
}
