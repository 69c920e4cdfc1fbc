package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

const sessionsUsage = `Usage:
  agenticctl sessions list [--agent A] [--state S] [--json]
                                    list sessions (ID AGENT NAME TYPE STATE EXIT COMMAND)
  agenticctl sessions create [--type T] [--name N] [--cwd DIR] [--env K=V]… AGENT -- CMD [ARGS…]
                                    start a session (type interactive|headless|background,
                                    default background) and print its id
  agenticctl sessions create --type interactive [--name N] [--cwd DIR] [--env K=V]… AGENT
                                    an interactive session without a command runs the
                                    agent's shell ($SHELL, else /bin/sh)
  agenticctl sessions get ID        show one session as indented JSON
  agenticctl sessions kill ID       kill a session (its whole process group)
`

const logsUsage = `Usage:
  agenticctl logs [-f] [--from N] SESSION

Writes the session's raw output to stdout, from offset N (default: the first
byte the server still holds). With -f it follows live output until the
session ends. Dropped bytes are reported on stderr.
`

func (c *cli) sessions(args []string) int {
	return c.group("sessions", sessionsUsage, args,
		verb{[]string{"list", "ls"}, c.sessionsList},
		verb{[]string{"create", "new"}, c.sessionsCreate},
		verb{[]string{"get", "show"}, c.sessionsGet},
		verb{[]string{"kill", "rm"}, c.sessionsKill})
}

func (c *cli) sessionsList(args []string) int {
	flags := c.flagSet("agenticctl sessions list")
	agent := flags.String("agent", "", "only the sessions of agent `A`")
	state := flags.String("state", "", "only sessions in state `S` (starting, running, exited, killed, lost)")
	asJSON := flags.Bool("json", false, "print the list as JSON")
	if code, done := parseFlags(flags, args, c.stdout, c.stderr, sessionsUsage); done {
		return code
	}
	if flags.NArg() > 0 {
		return c.fail("sessions list takes no arguments, got %q", flags.Args())
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	params := &restapi.ListSessionsParams{}
	if *agent != "" {
		params.AgentId = agent
	}
	if *state != "" {
		params.State = (*restapi.SessionState)(state)
	}
	resp, err := cl.ListSessionsWithResponse(context.Background(), params)
	if err != nil || resp.JSON200 == nil {
		return c.failed(server, err, resp)
	}
	return c.list(*asJSON, resp.Body, "ID\tAGENT\tNAME\tTYPE\tSTATE\tEXIT\tCOMMAND", func(w io.Writer) {
		for _, s := range resp.JSON200.Sessions {
			exit := "-"
			if s.ExitCode != nil {
				exit = strconv.Itoa(*s.ExitCode)
			}
			cmd := strings.Join(append([]string{s.Command}, s.Args...), " ")
			if len(cmd) > 60 {
				cmd = cmd[:60] + "…"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(s.SessionId), cell(s.AgentId), cell(s.Name), cell(string(s.Type)), cell(string(s.State)), exit, cell(cmd))
		}
	})
}

func (c *cli) sessionsCreate(args []string) int {
	flags := c.flagSet("agenticctl sessions create")
	typ := flags.String("type", string(restapi.SessionBackground), "session type `T`: interactive, headless or background")
	name := flags.String("name", "", "session `NAME`, unique among the agent's live sessions")
	cwd := flags.String("cwd", "", "working `DIR` on the agent")
	var envs multiFlag
	flags.Var(&envs, "env", "set `KEY=VALUE` in the session's environment (repeatable)")
	if code, done := parseFlags(flags, args, c.stdout, c.stderr, sessionsUsage); done {
		return code
	}
	if !restapi.SessionType(*typ).Valid() {
		return c.fail("--type must be interactive, headless or background, not %q", *typ)
	}
	t := restapi.SessionType(*typ)
	var rc remoteCommand
	switch agent, alone := agentAlone(flags.Args()); {
	case alone && t == restapi.SessionInteractive:
		// No command: the agent's shell.
		env, err := envVars(envs)
		if err != nil {
			return c.fail("%v", err)
		}
		rc = remoteCommand{agent: agent, env: env}
	case alone:
		return c.fail("a %s session needs a command after the agent, e.g. 'agenticctl sessions create %s -- npm run dev' (only --type interactive without one runs the agent's shell)", t, agent)
	default:
		var code int
		var ok bool
		if rc, code, ok = c.remoteCommand("sessions create", "npm run dev", flags.Args(), envs); !ok {
			return code
		}
	}
	req := restapi.CreateSessionRequest{Type: &t, Command: rc.command, Args: rc.args, Env: rc.env}
	if *name != "" {
		req.Name = name
	}
	if *cwd != "" {
		req.Cwd = cwd
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	resp, err := cl.CreateSessionWithResponse(context.Background(), rc.agent, req)
	if err != nil || resp.JSON201 == nil {
		return c.failed(server, err, resp)
	}
	fmt.Fprintln(c.stdout, clean(resp.JSON201.SessionId))
	return 0
}

func (c *cli) sessionsGet(args []string) int {
	return c.showByID("sessions get", sessionsUsage,
		"sessions get takes exactly one session id; 'agenticctl sessions list' shows them", args, restapi.ClientInterface.GetSession)
}

func (c *cli) sessionsKill(args []string) int {
	id, code, ok := c.oneArg("sessions kill", sessionsUsage,
		"sessions kill takes exactly one session id; 'agenticctl sessions list' shows them", args)
	if !ok {
		return code
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	resp, err := cl.KillSessionWithResponse(context.Background(), id)
	if err != nil || resp.JSON202 == nil {
		return c.failed(server, err, resp)
	}
	fmt.Fprintf(c.stdout, "kill sent to %s\n", clean(resp.JSON202.SessionId))
	return 0
}

func (c *cli) logs(args []string) int {
	flags := c.flagSet("agenticctl logs")
	follow := flags.Bool("f", false, "follow live output until the session ends")
	from := flags.Int64("from", -1, "start at byte offset `N` (default: the first byte held)")
	if code, ok := c.operands(flags, logsUsage, args, 1, "logs takes exactly one session id; 'agenticctl sessions list' shows them"); !ok {
		return code
	}
	id := flags.Arg(0)
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	params := &restapi.GetSessionOutputParams{}
	if *from >= 0 {
		params.From = from
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *follow {
		return c.logsFollow(ctx, cl, server, id, params)
	}
	for {
		resp, err := cl.GetSessionOutput(ctx, id, params)
		if err != nil {
			return c.unreachable(server, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return c.fail("reading the output: %v", err)
		}
		if resp.StatusCode != http.StatusOK {
			return c.apiError(resp.StatusCode, body)
		}
		start, err1 := strconv.ParseInt(resp.Header.Get("X-Output-Start"), 10, 64)
		end, err2 := strconv.ParseInt(resp.Header.Get("X-Output-End"), 10, 64)
		if err1 != nil || err2 != nil {
			return c.fail("the server sent no output offsets")
		}
		if resp.Header.Get("X-Output-Gap") == "true" {
			c.gapNotice(params.From, start)
		}
		if _, err := c.stdout.Write(body); err != nil {
			return c.fail("writing the output: %v", err)
		}
		if len(body) == 0 {
			return 0
		}
		params.From = &end
	}
}

func (c *cli) gapNotice(from *int64, start int64) {
	f := int64(0)
	if from != nil {
		f = *from
	}
	fmt.Fprintf(c.stderr, "agenticctl: %d bytes of output were dropped before offset %d\n", start-f, start)
}

// logsFollow reads the SSE stream of the output until the session ends.
func (c *cli) logsFollow(ctx context.Context, cl *restapi.ClientWithResponses, server, id string, params *restapi.GetSessionOutputParams) int {
	resp, err := cl.GetSessionOutput(ctx, id, params, func(_ context.Context, req *http.Request) error {
		req.Header.Set("Accept", "text/event-stream")
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return exitError
		}
		return c.unreachable(server, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return c.apiError(resp.StatusCode, body)
	}
	br := bufio.NewReaderSize(resp.Body, 256<<10)
	var event, data string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if ctx.Err() != nil {
				return exitError
			}
			return c.fail("the output stream ended early: %v", err)
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		switch {
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
			continue
		case strings.HasPrefix(line, "data:"):
			data = strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
			continue
		case line != "":
			continue // id:, comments
		}
		switch event {
		case "output":
			var f struct {
				Data     string `json:"data"`
				Encoding string `json:"encoding"`
			}
			if err := json.Unmarshal([]byte(data), &f); err != nil {
				return c.fail("the server sent an invalid output frame: %v", err)
			}
			b := []byte(f.Data)
			if f.Encoding == string(restapi.Base64) {
				if b, err = base64.StdEncoding.DecodeString(f.Data); err != nil {
					return c.fail("the server sent invalid base64 output: %v", err)
				}
			}
			if _, err := c.stdout.Write(b); err != nil {
				return c.fail("writing the output: %v", err)
			}
		case "gap":
			var g struct{ From, To int64 }
			if json.Unmarshal([]byte(data), &g) == nil {
				fmt.Fprintf(c.stderr, "agenticctl: %d bytes of output were dropped before offset %d\n", g.To-g.From, g.To)
			}
		case "exited":
			return 0
		}
		event, data = "", ""
	}
}
