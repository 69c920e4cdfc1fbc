package ports

import (
	"context"
	"errors"
	"time"
)

// Kinds of use an environment's idle clock hears of (the record's
// last_activity_kind).
const (
	UseExec    = "exec"    // a command, a task step or a mission's run
	UseSession = "session" // a session created, attached, or its output
	UseViewer  = "viewer"  // a viewer attached to a session
	UseFiles   = "files"   // a file read, written, listed or deleted
	UseTunnel  = "tunnel"  // egress through the agent
	UsePreview = "preview" // a preview or a forwarded port's connection
	UseWake    = "wake"    // an explicit wake
)

// ErrWakeFailed is work aimed at a hibernated environment that could not be
// woken (its saved state lost, the wake bound passed): the environment is
// then failed with the reason, and the work is refused rather than queued.
var ErrWakeFailed = errors.New("the hibernated environment could not be woken")

// EnvironmentUse is how work aimed at an agent tells that agent's
// environment it is in use. It wakes a hibernated environment first, so
// the caller waits (bounded) instead of failing, and it keeps the
// environment's idle clock from running while the work holds it.
type EnvironmentUse interface {
	// Use wakes agentID's environment if it is hibernated (concurrent
	// callers wake it once and all wait for that one wake) and holds it in
	// use by kind until release is called (release is safe to call more
	// than once). An agent that is no environment's, or one that is not
	// hibernated, returns at once. Errors: ErrWakeFailed, or ctx's.
	Use(ctx context.Context, agentID, kind string) (release func(), err error)
	// Touch records activity (session output, bytes through a tunnel)
	// without holding the environment.
	Touch(agentID, kind string)
}

// NoUse is the EnvironmentUse of a server without hibernation: nothing to
// wake, nothing to hold.
type NoUse struct{}

// Use returns at once.
func (NoUse) Use(context.Context, string, string) (func(), error) { return func() {}, nil }

// Touch does nothing.
func (NoUse) Touch(string, string) {}

// Activity is when an environment was last used and for what (a Use*
// kind): its record's last_activity_at and last_activity_kind (At zero:
// never used). Sleep is what its record says of its sleep, which its
// runtime does not keep.
type Activity struct {
	At    time.Time `json:"at"`
	Kind  string    `json:"kind"`
	Sleep Sleep     `json:"sleep,omitzero"`
}

// Sleep is what the record of a hibernated environment says of its sleep
// beyond what its runtime reports: why it went to sleep (sleep_reason),
// and the error of its last wake when that failed (its record's error);
// WakeLost when that wake found the saved state lost (the environment
// failed, whatever its runtime still keeps). Zero for one awake.
type Sleep struct {
	Reason    string `json:"reason,omitempty"`
	WakeError string `json:"wake_error,omitempty"`
	WakeLost  bool   `json:"wake_lost,omitempty"`
}

// ActivityStore keeps the environments' last activity, by environment
// name, so that a restarted server still knows when each was last used
// (and its idle policy counts from then, not from the restart), and what
// their records say of their sleep. Writers batch the uses: it is written
// every few seconds at most, never per use; a change of sleep (a
// hibernation, a wake or its failure) is written at once.
type ActivityStore interface {
	Activities(ctx context.Context) (map[string]Activity, error)
	// PutActivities sets the activity of each environment named (its
	// whole entry: its Sleep too).
	PutActivities(ctx context.Context, acts map[string]Activity) error
	// DeleteActivity forgets an environment's; one never stored is no error.
	DeleteActivity(ctx context.Context, name string) error
}
