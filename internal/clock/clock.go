// Package clock is the wall clock behind ports.Clock, the default of every
// adapter that takes a clock (tests pass their own).
package clock

import "time"

// Wall is the system's wall clock.
type Wall struct{}

// Now returns the current time.
func (Wall) Now() time.Time { return time.Now() }
