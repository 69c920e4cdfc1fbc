package ports

import "context"

// IdentityKeeper is a Runtime that must be told when an environment's agent
// takes another identity (a pool member handed over to its caller): what it
// keeps to start the agent again (a Kubernetes pod made anew by Start) would
// otherwise bring back the old one, whose credential is revoked. Runtimes
// that keep the agent's own writable disk (a container's layer, a VM's
// disk) need not: the agent keeps its identity there itself.
type IdentityKeeper interface {
	// KeepIdentity records that the agent of the environment the runtime
	// knows as name is now agentID, signing in with secret.
	KeepIdentity(ctx context.Context, name, agentID, secret string) error
}
