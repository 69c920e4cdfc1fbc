// Package system provides the real id generator behind ports.IDGenerator
// (the wall clock is internal/clock).
package system

import (
	"github.com/google/uuid"
)

// UUIDv7 makes time-ordered UUIDv7 ids, so ids sort by creation.
type UUIDv7 struct{}

// NewID returns a new UUIDv7.
func (UUIDv7) NewID() string { return uuid.Must(uuid.NewV7()).String() }
