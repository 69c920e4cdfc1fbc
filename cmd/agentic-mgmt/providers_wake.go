package main

import (
	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/core/session"
	"github.com/agentic-sandbox/agentic-sandbox/core/wakeful"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Wakeful is the agent link as the work aimed at agents reaches it: each
// piece first tells its agent's environment it is in use (core/wakeful), so
// a hibernated one wakes and a used one is not put to sleep by its idle
// policy. Every caller that works on an agent gets these, never the link
// itself: missions, tasks, sessions, the REST API and the operator Exec
// RPC, previews and port-forward. The environment use case keeps the bare
// link (its pool warm-ups are housekeeping, and a wake must not wait for
// itself).
type Wakeful struct {
	// Link starts commands (execs, background commands, task steps,
	// missions): each holds its environment until it ends.
	Link ports.AgentLink
	// Sessions is the session use case's link: a kept session's command
	// touches its environment with its output, also when bound again after
	// its agent came back.
	Sessions ports.AgentLink
	Files    ports.AgentFiles
	// Dialer opens previews' and port-forwards' connections.
	Dialer ports.PortDialer
}

// provideWakeful decorates the link once, with the router as the
// environments' use (bound to the environment use case before anything
// serves), and has the operator Exec RPC start through it too.
func provideWakeful(svc *agentrpc.Service, reports *linkReports) Wakeful {
	w := Wakeful{
		Link:     wakeful.Link{AgentLink: svc, Use: reports},
		Sessions: wakeful.Link{AgentLink: svc, Use: reports, AttachedOutput: ports.UseSession},
		Files:    wakeful.Files{Files: svc, Use: reports},
		Dialer:   wakeful.Dialer{Dialer: svc, Use: reports},
	}
	svc.SetExecLink(w.Link)
	return w
}

// provideViewedSessions is the session use case as the REST API and the
// client WebSocket reach it: creating a session wakes its environment
// first, and a viewer holds the environment while it watches.
func provideViewedSessions(ss *session.Service, reports *linkReports) *wakeful.Sessions {
	return wakeful.NewSessions(ss, reports)
}
