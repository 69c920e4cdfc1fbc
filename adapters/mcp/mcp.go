// Package mcp exposes agentic-sandbox to AI agents as Model Context Protocol
// tools: environments, exec, files, sessions and tasks. Every tool is one
// or a few calls of the REST API through the generated client, with the
// operator's token, so an MCP client can do exactly what that token allows
// over REST and nothing more; a REST error comes back as a tool error
// whose text is the REST {"error", "code"} (with the HTTP "status").
//
// agenticctl serves the tools on stdio (NewServer with its own client);
// agentic-mgmt serves them at /mcp on the REST port (Mount), calling its
// own REST handler in process with the token each MCP request carries.
package mcp

import (
	"log/slog"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// Options configure the tool set.
type Options struct {
	// Version is reported to MCP clients as the server's.
	Version string
	// ForwardAuthorization makes each tool call send to the REST API the
	// Authorization header of the MCP request that carried it (the
	// server's endpoint: the caller's own token, never one of the
	// server's). Without it the client sends its own (agenticctl's).
	ForwardAuthorization bool
	Logger               *slog.Logger
}

// instructions tell a model what the tools are about and how they fit.
const instructions = `agentic-sandbox runs commands for you in sandboxes: host processes, containers or VMs ("environments"), each with an agent named like the environment; host agents (host-01, …) are agents without an environment.
- list_runtimes says which runtimes this server offers; create_environment makes one and waits until its agent is ready; delete_environment destroys it.
- exec runs one command on an agent and returns its exit code and output; list_files, read_file and write_file work on the agent's files (relative paths are relative to the directory its commands start in).
- start_session starts a long-running command whose output is kept; read_session_output reads it from an offset (wait=true waits for more); kill_session ends it.
- submit_task runs a task manifest (a repository, a prompt or command.argv, an environment) in a fresh environment; wait_task waits for its end and returns the task with its outcome.
Errors are tool errors whose text is JSON {"error", "code", "status"}: code is the REST API's stable code (e.g. agent_not_found, environment_exists).`

// NewServer returns an MCP server with the tool set, calling the REST API
// through client.
func NewServer(client restapi.ClientInterface, o Options) *sdk.Server {
	if o.Version == "" {
		o.Version = "dev"
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "agentic-sandbox", Title: "agentic-sandbox", Version: o.Version},
		&sdk.ServerOptions{Instructions: instructions, Logger: o.Logger})
	t := &tools{c: client, forward: o.ForwardAuthorization}
	t.register(s)
	return s
}
