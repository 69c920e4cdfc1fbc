package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	mcptools "github.com/agentic-sandbox/agentic-sandbox/adapters/mcp"
)

const mcpUsage = `Usage:
  agenticctl [--server URL] [--token TOKEN] mcp

Serves agentic-sandbox to an AI agent as Model Context Protocol tools on
stdin and stdout (the stdio transport): list_agents, list_runtimes,
list_environments, create_environment, delete_environment, exec, list_files,
read_file, write_file, start_session, read_session_output, kill_session,
submit_task, wait_task, cancel_task. Each tool calls the REST API with the
operator token (found as for every command), so it can do what the token
allows and nothing more; a REST error comes back as a tool error whose text
is the REST {"error", "code", "status"}. An MCP client starts it, e.g.:

  {"mcpServers": {"agentic-sandbox": {"command": "agenticctl", "args": ["mcp"],
    "env": {"AGENTIC_SERVER": "http://127.0.0.1:8122"}}}}

It runs until the client closes stdin. Messages about it go to stderr.
`

func (c *cli) mcp(args []string) int {
	flags := c.flagSet("agenticctl mcp")
	if code, ok := c.operands(flags, mcpUsage, args, 0, "mcp takes no arguments; run 'agenticctl mcp --help'"); !ok {
		return code
	}
	cl, _, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	log := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv := mcptools.NewServer(cl.ClientInterface, mcptools.Options{Version: ctlVersion(), Logger: log})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	in, out := c.stdin, c.stdout
	if in == nil {
		in = os.Stdin
	}
	t := &sdk.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}}
	if err := srv.Run(ctx, t); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		return c.fail("mcp: %v", err)
	}
	return 0
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// ctlVersion is the module version agenticctl was built from ("dev" from a
// work tree).
func ctlVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
