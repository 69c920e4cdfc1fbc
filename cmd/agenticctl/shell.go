package main

import (
	"context"
	"fmt"
	"strings"
)

const shellUsage = `agenticctl shell [flags] AGENT|ENVIRONMENT [-- CMD [ARGS…]]

Starts an interactive session on the agent and attaches this terminal to it
in one step, like 'docker exec -it': the agent's own shell ($SHELL, else
/bin/sh), or CMD when given. An environment's agent has the environment's
name, so 'agenticctl shell dev-1' opens a shell in environment dev-1.

The terminal goes raw (every key reaches the shell), the session starts at
this terminal's size and follows its resizes. The detach key (default
Ctrl-], i.e. Ctrl and the right square bracket) leaves the session running
and prints how to come back ('agenticctl attach SESSION'); the shell ending
ends agenticctl with the shell's exit code. Where the agent has tmux the
shell is kept in tmux, so it also outlives a restart of the agent.

Examples:
  agenticctl shell host-01
  agenticctl shell --name work dev-1
  agenticctl shell dev-1 -- bash -l
`

func (c *cli) shell(args []string) int {
	var o attachOptions
	flags := c.flagSet("agenticctl shell")
	name := flags.String("name", "", "session `NAME`, unique among the agent's live sessions (default: shell-<random>)")
	cwd := flags.String("cwd", "", "working `DIR` of CMD on the agent (only with a CMD)")
	var envs multiFlag
	flags.Var(&envs, "env", "set `KEY=VALUE` in CMD's environment (repeatable; only with a CMD)")
	flags.StringVar(&o.detachKey, "detach-key", "ctrl-]", "key that detaches: ctrl-<char>, or none")
	flags.StringVar(&o.ws, "ws", "", "client WebSocket URL (env AGENTIC_WS; default: the REST port - 1, path /ws)")
	if code, done := parseFlags(flags, args, c.stdout, c.stderr, shellUsage); done {
		return code
	}
	operands := flags.Args()
	if len(operands) > 0 && operands[0] == "--" {
		operands = operands[1:]
	}
	if len(operands) == 0 || operands[0] == "" {
		return c.fail("shell needs an agent or environment, e.g. 'agenticctl shell host-01'; 'agenticctl agents list' shows them")
	}
	agent, cmdline := operands[0], operands[1:]
	if len(cmdline) > 0 && cmdline[0] == "--" {
		cmdline = cmdline[1:]
	}
	if len(cmdline) > 0 && cmdline[0] == "" {
		return c.fail("shell: the command after -- is empty")
	}
	if len(cmdline) == 0 && (*cwd != "" || len(envs) > 0) {
		return c.fail("--cwd and --env apply to a command: 'agenticctl shell %s --cwd DIR -- bash'", agent)
	}
	env, err := envVars(envs)
	if err != nil {
		return c.fail("%v", err)
	}
	detach, wsURL, token, err := c.terminalSetup(o)
	if err != nil {
		return c.fail("%v", err)
	}
	open := attachFrame{Type: "start_shell", ID: "shell", AgentID: agent, Name: *name}
	if len(cmdline) > 0 {
		open = attachFrame{Type: "create_session", ID: "shell", AgentID: agent, Name: *name,
			SessionType: "interactive", Command: cmdline[0], Args: cmdline[1:], Cwd: *cwd}
		if env != nil {
			open.Env = *env
		}
	}
	return c.attachTo(wsURL, token, open, detach, o)
}

// openHint says what to do about a refused join_session, start_shell or
// create_session.
func (c *cli) openHint(open attachFrame, code string) string {
	switch code {
	case "session_not_found":
		return "'agenticctl sessions list' shows the sessions"
	case "agent_not_connected":
		return "the agent is known but not connected; 'agenticctl agents list' shows its status"
	case "agent_not_found":
		if open.AgentID == "" {
			return ""
		}
		// An environment's agent has its name: one that is not ready yet
		// has no agent to open a shell on.
		if cl, _, err := c.client(); err == nil {
			resp, err := cl.GetEnvironmentWithResponse(context.Background(), open.AgentID)
			if err == nil && resp.JSON200 != nil {
				e := resp.JSON200
				msg := fmt.Sprintf("environment %s is %s; its agent connects once it is ready ('agenticctl env get %s')", clean(e.Name), clean(string(e.State)), clean(e.Name))
				if e.Error != nil && *e.Error != "" {
					msg += ": " + clean(*e.Error)
				}
				return msg
			}
		}
		return "no agent or environment " + strings.TrimSpace(clean(open.AgentID)) + "; 'agenticctl agents list' and 'agenticctl env list' show them"
	case "invalid_request":
		if open.Name != "" {
			return "a live session of that name may exist: 'agenticctl sessions list --agent " + clean(open.AgentID) + "'"
		}
	}
	return ""
}
