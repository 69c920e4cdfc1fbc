// Package system provides the real clock and id generator behind the ports.
package system

import (
	"time"

	"github.com/google/uuid"
)

// Clock is the wall clock.
type Clock struct{}

// Now returns the current time.
func (Clock) Now() time.Time { return time.Now() }

// UUIDv7 makes time-ordered UUIDv7 ids, so ids sort by creation.
type UUIDv7 struct{}

// NewID returns a new UUIDv7.
func (UUIDv7) NewID() string { return uuid.Must(uuid.NewV7()).String() }
