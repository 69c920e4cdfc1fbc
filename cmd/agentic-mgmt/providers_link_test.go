package main

import (
	"log/slog"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/promexport"
	"github.com/agentic-sandbox/agentic-sandbox/core/egress"
	"github.com/agentic-sandbox/agentic-sandbox/core/environment"
	"github.com/agentic-sandbox/agentic-sandbox/internal/clock"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

type heardReports struct {
	sessions map[string]int
	asked    []string
}

func (h *heardReports) ReconcileSessions(agentID string, reported []ports.ReportedSession) {
	h.sessions[agentID] = len(reported)
}

func (h *heardReports) PermissionAsked(req ports.PermissionRequest) bool {
	h.asked = append(h.asked, req.RequestID)
	return true
}

func (h *heardReports) EgressRules(agentID string) ([]egress.Rule, bool) {
	return nil, agentID == "proxied"
}

// Before it is bound the router answers as a server without use cases:
// nothing reaches a use case, every agent is held, no egress; bound, it
// passes each report to its use case; it binds once.
func TestLinkReportsBeforeAndAfterBinding(t *testing.T) {
	r := provideLinkReports(slog.New(slog.DiscardHandler), promexport.NewEgressMetrics())
	if r.PermissionAsked(ports.PermissionRequest{RequestID: "early"}) {
		t.Error("a permission question before binding was taken")
	}
	if !r.AgentHeld("a") {
		t.Error("an agent was free before binding")
	}
	if _, ok := r.EgressRules("proxied"); ok {
		t.Error("egress before binding")
	}
	r.ReconcileSessions("a", []ports.ReportedSession{{}}) // dropped, logged
	r.egressObserved(agentrpc.EgressRecord{AgentID: "a"}) // counted only

	heard := &heardReports{sessions: map[string]int{}}
	var recorded []string
	r.bind(&linkTargets{
		sessions: heard, permissions: heard, egress: heard, clock: clock.Wall{},
		held:         func(id string) bool { return id == "member" },
		recordEgress: func(id string, _ environment.EgressEntry) { recorded = append(recorded, id) },
	})
	r.ReconcileSessions("a", []ports.ReportedSession{{}, {}})
	if !r.PermissionAsked(ports.PermissionRequest{RequestID: "r1"}) || len(heard.asked) != 1 || heard.sessions["a"] != 2 {
		t.Errorf("bound: asked %v, sessions %v", heard.asked, heard.sessions)
	}
	if r.AgentHeld("a") || !r.AgentHeld("member") {
		t.Error("held set not the environments'")
	}
	if _, ok := r.EgressRules("proxied"); !ok {
		t.Error("no egress once bound")
	}
	r.egressObserved(agentrpc.EgressRecord{AgentID: "proxied"})
	if len(recorded) != 1 || recorded[0] != "proxied" {
		t.Errorf("egress kept: %v", recorded)
	}
	defer func() {
		if recover() == nil {
			t.Error("a second binding was taken")
		}
	}()
	r.bind(&linkTargets{})
}
