package main

import (
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/agentrpc"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/aiwg"
	"github.com/agentic-sandbox/agentic-sandbox/adapters/filestore"
	"github.com/agentic-sandbox/agentic-sandbox/core/mission"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// Identity is this instance's UUIDv7, also its executor_id.
type Identity string

func provideIdentity(dir DataDir) (Identity, error) {
	id, err := filestore.LoadOrCreateIdentity(string(dir))
	return Identity(id), err
}

func provideMissionStore(cfg Config, dir DataDir, clock ports.Clock) (*filestore.MissionStore, func(), error) {
	st, err := filestore.NewMissionStore(filestore.MissionStoreConfig{Dir: string(dir), Retention: cfg.MissionRetention, Clock: clock})
	if err != nil {
		return nil, nil, err
	}
	return st, func() { _ = st.Close() }, nil
}

func provideOutbox(dir DataDir, log *slog.Logger) (*filestore.Outbox, func(), error) {
	o, err := filestore.NewOutbox(string(dir))
	if err != nil {
		return nil, nil, err
	}
	if n := o.CorruptLines(); n > 0 {
		log.Warn("event outbox: lines that did not parse were skipped (a crash mid-write leaves such)", "file", filepath.Join(string(dir), "events.jsonl"), "lines", n)
	}
	return o, func() { _ = o.Close() }, nil
}

func provideMissions(store ports.MissionStore, outbox ports.EventOutbox, svc *agentrpc.Service, clock ports.Clock, ids ports.IDGenerator, log *slog.Logger, ch ports.ChangeNotifier, reports *linkReports, w Wakeful) *mission.Service {
	return mission.New(mission.Config{
		Store: store, Outbox: outbox, Link: w.Link, Agents: svc, Clock: clock, IDs: ids, Logger: log, Permissions: svc, Changes: ch,
		// An idle pool member is held for whoever takes it: no mission goes
		// there (the router knows once the environments exist).
		Reserved: reports,
		// A hibernated environment's agent takes missions too: the launch
		// (w.Link) wakes it.
		Asleep: reports,
	})
}

func provideAIWG(cfg Config, id Identity, hub *mission.Service, outbox ports.EventOutbox, clock ports.Clock, log *slog.Logger, rts *Runtimes) *aiwg.Client {
	_, claudeErr := exec.LookPath("claude")
	claudeOnHost := claudeErr == nil
	_, port, _ := net.SplitHostPort(cfg.ListenAddr)
	p, _ := strconv.Atoi(port)
	host := cfg.AdvertiseHost
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	at := func(scheme string, delta int) string {
		return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(p+delta))
	}
	return aiwg.New(aiwg.Config{
		Endpoint:     cfg.AIWGEndpoint,
		Name:         cfg.AIWGName,
		InstanceID:   string(id),
		Version:      cfg.Version,
		GRPCEndpoint: at("http", 0),
		WSEndpoint:   at("ws", 1),
		RESTEndpoint: at("http", 2),
		Capabilities: func() []string {
			// Routable agents only: an idle pool member's tier or tools are
			// not on offer (a mission would find no agent).
			return mission.ExecutorCapabilities(runtime.GOARCH, rts.Isolations(cfg.HostAgents > 0), claudeOnHost, hub.Candidates())
		},
		Hub:    hub,
		Outbox: outbox,
		Logger: log,
		Clock:  clock,
	})
}
