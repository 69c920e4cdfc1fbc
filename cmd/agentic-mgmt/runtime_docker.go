package main

import (
	"fmt"
	"path/filepath"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/docker"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// dockerOptions are the docker runtime's settings.
type dockerOptions struct {
	// Host is dockerd's address; "" is the client's default socket.
	Host string
}

// dockerSocket is where dockerd listens unless DOCKER_HOST says otherwise.
const dockerSocket = "/var/run/docker.sock"

// dockerRuntime runs environments as containers on a dockerd of this
// machine; it is the default for tasks where it answers.
var dockerRuntime = runtimeDef[dockerOptions]{
	Name:        docker.RuntimeName,
	Help:        "a container on this machine's dockerd, of any image (the agent is mounted in), hardened, no network by default",
	FoundDoc:    "when `DOCKER_HOST` is set or `" + dockerSocket + "` exists",
	HowTo:       "start a dockerd on this machine (`make docker` starts a private one, which `make run` uses) or point `DOCKER_HOST` at one",
	DefaultRank: 2,
	Settings: []setting{
		{Env: "DOCKER_HOST", DefaultDoc: "`unix://" + dockerSocket + "`",
			Doc: "where the docker runtime reaches dockerd, which must run on this machine (the agent and its socket are mounted by host path)"},
	},
	Configure: func(v settingValues, _ Config) (dockerOptions, error) {
		o := dockerOptions{Host: v["DOCKER_HOST"]}
		if err := checkURL(o.Host); err != nil {
			return o, fmt.Errorf("DOCKER_HOST: %w", err)
		}
		return o, nil
	},
	Found: func(o dockerOptions) bool { return o.Host != "" || exists(dockerSocket) },
	New: func(cfg Config, o dockerOptions, deps runtimeDeps) (ports.Runtime, func(), error) {
		rt, err := docker.New(docker.Config{Host: o.Host, Owner: owner(cfg), SecretDir: filepath.Join(cfg.DataDir, "docker-secrets"), Logger: deps.Log})
		if err != nil {
			return nil, nil, err
		}
		return rt, func() { _ = rt.Close() }, nil
	},
}
