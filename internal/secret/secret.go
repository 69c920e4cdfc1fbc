// Package secret makes the random secrets the server hands out: agent
// secrets and the operator token.
package secret

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
)

// size is 256 bits: beyond guessing, and what sha256 hashes keep.
const size = 32

// New returns a fresh agent secret: 32 random bytes, hex encoded (safe in
// an env file, a kernel command line, a cloud-init seed).
func New() (string, error) {
	b := make([]byte, size)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// Token returns a fresh bearer token: 32 random bytes, base64url without
// padding (shorter to paste than hex, safe in a header).
func Token() (string, error) {
	b := make([]byte, size)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
