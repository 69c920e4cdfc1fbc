package main

import (
	"path/filepath"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/hostsup"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// hostRuntime runs environments as processes of this machine. It needs no
// engine, so it is always found and is the last resort for tasks.
var hostRuntime = runtimeDef[struct{}]{
	Name:        hostsup.RuntimeName,
	Help:        "an agent process on this machine in its own session and tmux server, sharing its network: no isolation",
	FoundDoc:    "always",
	HowTo:       "it needs no engine: name it in `AGENTIC_RUNTIMES`",
	DefaultRank: 1,
	Found:       func(struct{}) bool { return true },
	New: func(cfg Config, _ struct{}, d runtimeDeps) (ports.Runtime, func(), error) {
		return hostsup.NewRuntime(hostsup.RuntimeConfig{StateDir: filepath.Join(cfg.DataDir, "host-envs"), Logger: d.Log,
			ExtraEnv: cfg.agentEnv(), Users: d.HostUsers}), nil, nil
	},
}
