package ports

import (
	"context"
	"time"
)

// LabelPool is the environment label that marks a warm pool's member with
// its pool's name, kept with the environment itself so that a restarted
// server finds its pools' members again.
const LabelPool = "agentic-sandbox.pool"

// PoolSpec is what a pool's members are made with; an environment request
// with the same runtime and exactly this spec takes a member.
type PoolSpec struct {
	Image        string      `json:"image,omitempty"`
	Profile      string      `json:"profile,omitempty"`
	Resources    Resources   `json:"resources"`
	Network      NetworkMode `json:"network,omitempty"`
	AllowedHosts []string    `json:"allowed_hosts,omitempty"`
	ReadOnlyRoot bool        `json:"read_only_root,omitempty"`
	// Tier and Placement are the members' EnvironmentSpec.Tier and
	// .Placement: a take matches them too.
	Tier      string    `json:"isolation,omitempty"`
	Placement Placement `json:"placement,omitzero"`
}

// Pool is a warm pool's definition: keep Size environments of Spec on
// Runtime provisioned with their agents connected and idle.
type Pool struct {
	Name    string   `json:"name"`
	Runtime string   `json:"runtime"`
	Spec    PoolSpec `json:"spec"`
	Size    int      `json:"size"`
	// Idle is the policy of the environments taken from it (a member
	// waiting to be taken is never put to sleep).
	Idle IdlePolicy `json:"idle,omitzero"`
}

// IdlePolicy puts an environment to sleep: hibernated once nothing used it
// for IdleAfter, deleted once hibernated or stopped for DeleteAfter. Zero
// is off.
type IdlePolicy struct {
	IdleAfter   time.Duration `json:"idle_after,omitempty"`
	DeleteAfter time.Duration `json:"delete_after,omitempty"`
}

// LabelIdleAfter and LabelDeleteAfter keep an environment's IdlePolicy
// (time.Duration strings) with the environment itself, for a restarted
// server.
const (
	LabelIdleAfter   = "agentic-sandbox.idle-after"
	LabelDeleteAfter = "agentic-sandbox.delete-after"
)

// PoolStore keeps the pools defined at run time and the claims on their
// members, so that both outlive a restart of the server. A claim says a
// member (by its name on its runtime) now is the environment a caller
// asked for, under that caller's name.
type PoolStore interface {
	Pools(ctx context.Context) ([]Pool, error)
	PutPool(ctx context.Context, p Pool) error
	// DeletePool forgets a pool; deleting one never stored is no error.
	DeletePool(ctx context.Context, name string) error
	// Claims maps member names to the environment names they became.
	Claims(ctx context.Context) (map[string]string, error)
	PutClaim(ctx context.Context, member, environment string) error
	// DeleteClaim forgets a claim; deleting one never stored is no error.
	DeleteClaim(ctx context.Context, member string) error
}

// AgentRenamer gives a connected agent another identity over its link:
// it keeps its connection's place but registers again as newID with
// newSecret (whose hash the caller stored first), at once.
type AgentRenamer interface {
	RenameAgent(ctx context.Context, agentID, newID, newSecret string) error
}
