package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

const (
	// exitError is the status of usage and API errors (see the package doc).
	exitError     = 1
	defaultServer = "http://127.0.0.1:8122"
	// maxStdin keeps exec's stdin within the server's 1 MiB body limit
	// (with room for the rest of the request and JSON escaping).
	maxStdin = 1<<20 - 64<<10
	// serverExecTimeout is what the server applies when --timeout is 0.
	serverExecTimeout = 300
)

// geteuid is a variable so tests can pretend to be root or not.
var geteuid = os.Geteuid

const usageText = `agenticctl — operate an agentic-sandbox management server

Usage:
  agenticctl [--server URL] [--token TOKEN] <command> [arguments]

Commands:
  agents list            list the agents the server knows
  agents get ID          show one agent as JSON
  exec AGENT -- CMD …    run a command on an agent and wait for it
  sessions list|create|get|kill
                         sessions on the agents ('agenticctl sessions help')
  logs [-f] [--from N] SESSION
                         write a session's raw output to stdout (-f: follow until it ends)
  attach [--observe] [--detach-key ctrl-]] SESSION
                         attach this terminal to a session (detach: Ctrl-])
  shell AGENT|ENV [-- CMD …]
                         start a shell there and attach to it, like 'docker exec -it'
                         (detach: Ctrl-]; exits with the shell's exit code)
  env create|list|get|stop|start|rm|runtimes
                         environments (host processes, containers, VMs) and their agents
                         ('agenticctl env help')
  pool put|list|get|rm   warm pools: environments kept ready for 'env create' ('agenticctl pool help')
  task submit|list|get|cancel|artifacts
                         tasks: a manifest in, artifacts and a patch out ('agenticctl task help')
  cp [-q] SRC DST        copy files and directories to or from an agent (AGENT:PATH)
  ls AGENT:PATH          list a directory on an agent
  ports ENV              the TCP ports listening in an environment, with their preview URLs
  port public|private ENV PORT [--ttl 1h]
                         open a port's preview to anyone for a while, or not ('agenticctl port help')
  port-forward ENV LOCAL:REMOTE …
                         carry local ports' connections to ports inside an environment, like
                         'kubectl port-forward' ('agenticctl port-forward --help')
  token create|list|revoke
                         named tokens with roles (admins only; 'agenticctl token help')
  whoami [--json]        who the token is: its name, role, label scope and expiry
  mcp                    serve the sandboxes to an AI agent as MCP tools on stdio
                         ('agenticctl mcp --help')

Global flags:
  --server URL   REST endpoint of agentic-mgmt (env AGENTIC_SERVER, else the URL the
                 server left in its data dir, file rest-url; default ` + defaultServer + `)
  --token TOKEN  operator token or a named token (env AGENTIC_OPERATOR_TOKEN, else the
                 file operator-token in the data dir)

The data dir is $SECRETS_DIR/.. if set, else the nearest .state (make run's) in the
working directory or above, else /var/lib/agentic-sandbox as root, else
$XDG_STATE_HOME/agentic-sandbox or ~/.local/state/agentic-sandbox. So in a clone
running 'make run', bin/agenticctl needs no flags.

Exit status: exec exits with the command's own exit code; usage and API errors exit 1
with a message on stderr.

Run 'agenticctl <command> --help' for a command's flags.
`

type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	env            func(string) string
	server         string
	token          string
}

// run is the whole CLI; main only wires it to the process.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, env func(string) string) int {
	c := &cli{stdin: stdin, stdout: stdout, stderr: stderr, env: env}
	flags := flag.NewFlagSet("agenticctl", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {}
	flags.StringVar(&c.server, "server", "", "REST endpoint of agentic-mgmt")
	flags.StringVar(&c.token, "token", "", "operator token")
	if code, done := parseFlags(flags, args, stdout, stderr, usageText); done {
		return code
	}
	rest := flags.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, usageText)
		return exitError
	}
	commands := []verb{
		{[]string{"agents"}, c.agents},
		{[]string{"exec"}, c.exec},
		{[]string{"sessions", "session"}, c.sessions},
		{[]string{"logs"}, c.logs},
		{[]string{"attach"}, c.attach},
		{[]string{"shell"}, c.shell},
		{[]string{"env", "environments"}, c.environments},
		{[]string{"task", "tasks"}, c.task},
		{[]string{"pool", "pools"}, c.pools},
		{[]string{"cp"}, c.cp},
		{[]string{"ls"}, c.ls},
		{[]string{"mcp"}, c.mcp},
		{[]string{"ports"}, c.ports},
		{[]string{"port"}, c.port},
		{[]string{"port-forward"}, c.portForward},
		{[]string{"token", "tokens"}, c.tokens},
		{[]string{"whoami"}, c.whoami},
	}
	if run := lookup(commands, rest[0]); run != nil {
		return run(rest[1:])
	}
	if rest[0] == "help" {
		fmt.Fprint(stdout, usageText)
		return 0
	}
	fmt.Fprintf(stderr, "agenticctl: unknown command %q; run 'agenticctl --help' for the list\n", rest[0])
	return exitError
}

// parseFlags parses args; done says the caller should return code at once
// (help was asked for, or the flags were wrong).
func parseFlags(flags *flag.FlagSet, args []string, stdout, stderr io.Writer, usage string) (code int, done bool) {
	err := flags.Parse(args)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		if hasFlags(flags) {
			fmt.Fprintln(stdout, "\nFlags:")
			flags.SetOutput(stdout)
			flags.PrintDefaults()
		}
		return 0, true
	default:
		// flag has printed what is wrong.
		fmt.Fprintf(stderr, "run '%s --help' for usage\n", flags.Name())
		return exitError, true
	}
}

func hasFlags(flags *flag.FlagSet) bool {
	n := 0
	flags.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

func (c *cli) fail(format string, args ...any) int {
	fmt.Fprintf(c.stderr, "agenticctl: "+format+"\n", args...)
	return exitError
}

// client builds the generated client with the server URL and token.
func (c *cli) client() (*restapi.ClientWithResponses, string, error) {
	server := c.server
	if server == "" {
		server = c.env("AGENTIC_SERVER")
	}
	if server == "" {
		server = discoveredServer(c.env)
	}
	if server == "" {
		server = defaultServer
	}
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, server, fmt.Errorf("server URL %q is not an http(s) URL; set --server or AGENTIC_SERVER like %s", server, defaultServer)
	}
	token, err := c.resolveToken()
	if err != nil {
		return nil, server, err
	}
	cl, err := restapi.NewClientWithResponses(server,
		restapi.WithHTTPClient(&http.Client{}),
		restapi.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("User-Agent", "agenticctl")
			return nil
		}))
	return cl, server, err
}

// resolveToken: --token, then AGENTIC_OPERATOR_TOKEN, then the data dir's
// operator-token file.
func (c *cli) resolveToken() (string, error) {
	if c.token != "" {
		return c.token, nil
	}
	if t := strings.TrimSpace(c.env("AGENTIC_OPERATOR_TOKEN")); t != "" {
		return t, nil
	}
	dir, err := dataDir(c.env)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "operator-token")
	b, err := os.ReadFile(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("no operator token: pass --token, set AGENTIC_OPERATOR_TOKEN, or make %s exist (agentic-mgmt writes it on first start; for make run's, run agenticctl in its clone; set SECRETS_DIR if it uses another data dir)", p)
	case errors.Is(err, fs.ErrPermission):
		return "", fmt.Errorf("cannot read %s (permission denied): run as the user of agentic-mgmt, or pass --token / AGENTIC_OPERATOR_TOKEN", p)
	case err != nil:
		return "", fmt.Errorf("reading the operator token: %v", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("%s is empty: pass --token or set AGENTIC_OPERATOR_TOKEN", p)
	}
	return t, nil
}

// dataDir follows agentic-mgmt: the parent of SECRETS_DIR if set, else
// make run's .state in the working directory or above, else
// /var/lib/agentic-sandbox as root, else the XDG state dir.
func dataDir(env func(string) string) (string, error) {
	if sd := env("SECRETS_DIR"); sd != "" {
		return filepath.Dir(filepath.Clean(sd)), nil
	}
	if d, ok := stateDir(); ok {
		return d, nil
	}
	if geteuid() == 0 {
		return "/var/lib/agentic-sandbox", nil
	}
	state := env("XDG_STATE_HOME")
	// The XDG spec says relative paths are to be ignored.
	if state == "" || !filepath.IsAbs(state) {
		home := env("HOME")
		if home == "" {
			h, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("cannot find the data dir (no HOME): pass --token or set AGENTIC_OPERATOR_TOKEN")
			}
			home = h
		}
		state = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(state, "agentic-sandbox"), nil
}

// unreachable explains a request that got no HTTP answer.
func (c *cli) unreachable(server string, err error) int {
	return c.fail("cannot reach the server at %s: %v\nIs agentic-mgmt running? Point --server or AGENTIC_SERVER at its REST port.", server, err)
}

// flagSet is a subcommand's flags: errors to stderr, and no usage of its
// own (parseFlags prints the command's).
func (c *cli) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {}
	return fs
}

// failed explains a request that did not get the answer its caller wanted:
// err when the server was not reached, else resp (a generated response)
// with its status and error body.
func (c *cli) failed(server string, err error, resp interface{ StatusCode() int }) int {
	if err != nil {
		return c.unreachable(server, err)
	}
	var body []byte
	if v := reflect.Indirect(reflect.ValueOf(resp)); v.Kind() == reflect.Struct {
		if f := v.FieldByName("Body"); f.IsValid() && f.Kind() == reflect.Slice {
			body = f.Bytes()
		}
	}
	return c.apiError(resp.StatusCode(), body)
}

// apiError explains an HTTP error answer, with a hint for the usual ones.
func (c *cli) apiError(status int, body []byte) int {
	var e restapi.Error
	if err := json.Unmarshal(body, &e); err != nil || e.Code == "" {
		return c.fail("unexpected answer from the server (HTTP %d): %s", status, clip(string(body)))
	}
	hint := map[string]string{
		"unauthorized":        "check --token, AGENTIC_OPERATOR_TOKEN or the operator-token file",
		"agent_not_found":     "'agenticctl agents list' shows the known agents",
		"agent_not_connected": "wait until the agent reconnects ('agenticctl agents list' shows its status)",
		"body_too_large":      "requests are limited to 1 MiB; send less stdin",
		"wake_failed":         "the environment is failed now; 'agenticctl env get NAME' shows why",
		"hibernate_limit":     "wake or delete a hibernated environment first ('agenticctl env list' shows them)",
	}[e.Code]
	if hint != "" {
		hint = "\n" + hint
	}
	return c.fail("%s (%s, HTTP %d)%s", clean(e.Error), e.Code, status, hint)
}

func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return clean(s)
}

// clean replaces control characters so text from the server or an agent
// cannot drive the operator's terminal.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		if unicode.IsControl(r) || r == utf8.RuneError {
			return '?'
		}
		return r
	}, s)
}

const agentsUsage = `Usage:
  agenticctl agents list [--json]   list the agents (ID STATUS RUNTIME HOSTNAME RUNNING LAST-HEARTBEAT)
  agenticctl agents get ID          show one agent as indented JSON
`

func (c *cli) agents(args []string) int {
	return c.group("agents", agentsUsage, args,
		verb{[]string{"list", "ls"}, c.agentsList},
		verb{[]string{"get", "show"}, c.agentsGet})
}

func (c *cli) agentsList(args []string) int {
	flags := c.flagSet("agenticctl agents list")
	asJSON := flags.Bool("json", false, "print the list as JSON")
	if code, done := parseFlags(flags, args, c.stdout, c.stderr, "Usage: agenticctl agents list [--json]\n"); done {
		return code
	}
	if flags.NArg() > 0 {
		return c.fail("agents list takes no arguments, got %q", flags.Args())
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	resp, err := cl.ListAgentsWithResponse(context.Background(), nil)
	if err != nil || resp.JSON200 == nil {
		return c.failed(server, err, resp)
	}
	return c.list(*asJSON, resp.Body, "ID\tSTATUS\tRUNTIME\tHOSTNAME\tRUNNING\tLAST-HEARTBEAT", func(w io.Writer) {
		for _, a := range resp.JSON200.Agents {
			hb := "-"
			if a.LastHeartbeat != nil {
				hb = a.LastHeartbeat.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\n", cell(a.Id), cell(string(a.Status)), cell(string(a.Runtime)), cell(a.Hostname), a.RunningCommands, hb)
		}
	})
}

// cell keeps a table cell on one line and free of control characters.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.NewReplacer("\n", " ", "\t", " ").Replace(clean(s))
}

func (c *cli) agentsGet(args []string) int {
	return c.showByID("agents get", "Usage: agenticctl agents get ID\n",
		"agents get takes exactly one agent id; 'agenticctl agents list' shows them", args, restapi.ClientInterface.GetAgent)
}

// printJSON indents the server's JSON as is, so fields newer than this
// client are shown too.
func (c *cli) printJSON(body []byte) int {
	var out bytes.Buffer
	if err := json.Indent(&out, body, "", "  "); err != nil {
		return c.fail("the server sent invalid JSON: %v", err)
	}
	out.WriteByte('\n')
	if _, err := c.stdout.Write(out.Bytes()); err != nil {
		return c.fail("writing the output: %v", err)
	}
	return 0
}

const execUsage = `Usage:
  agenticctl exec [flags] AGENT -- CMD [ARGS…]

Runs CMD on AGENT and waits for it. Its stdout and stderr are printed on
agenticctl's own, and agenticctl exits with its exit code (1 also for usage
and API errors, explained on stderr). Interrupting agenticctl kills the command.
`

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func (c *cli) exec(args []string) int {
	flags := c.flagSet("agenticctl exec")
	timeout := flags.Int("timeout", 0, fmt.Sprintf("kill the command after `S` seconds (0 = the server's default, %d s; at most 86400)", serverExecTimeout))
	pty := flags.Bool("pty", false, "run in a pseudo-terminal (stdout and stderr merged)")
	stdinFile := flags.String("stdin-file", "", "send the contents of `FILE` as the command's stdin")
	interactive := flags.Bool("i", false, "send agenticctl's stdin (read to its end) as the command's stdin")
	workdir := flags.String("workdir", "", "working `DIR` of the command on the agent")
	var envs multiFlag
	flags.Var(&envs, "env", "set `KEY=VALUE` in the command's environment (repeatable)")
	if code, done := parseFlags(flags, args, c.stdout, c.stderr, execUsage); done {
		return code
	}
	rc, code, ok := c.remoteCommand("exec", "uname -a", flags.Args(), envs)
	if !ok {
		return code
	}
	if *timeout < 0 || *timeout > 86400 {
		return c.fail("--timeout must be between 0 and 86400 seconds")
	}
	if *interactive && *stdinFile != "" {
		return c.fail("use either -i or --stdin-file, not both")
	}
	req := restapi.ExecRequest{Command: rc.command, Args: rc.args, Env: rc.env}
	if *timeout > 0 {
		req.TimeoutSeconds = timeout
	}
	if *pty {
		req.Pty = pty
	}
	if *workdir != "" {
		req.WorkingDir = workdir
	}
	var in io.Reader
	switch {
	case *interactive:
		in = c.stdin
	case *stdinFile != "":
		f, err := os.Open(*stdinFile)
		if err != nil {
			return c.fail("--stdin-file: %v", err)
		}
		defer f.Close()
		in = f
	}
	if in != nil {
		b, err := io.ReadAll(io.LimitReader(in, maxStdin+1))
		if err != nil {
			return c.fail("reading stdin: %v", err)
		}
		if len(b) > maxStdin {
			return c.fail("stdin is larger than %d KiB; exec sends it in one request, so send less", maxStdin>>10)
		}
		if !utf8.Valid(b) {
			return c.fail("stdin is not valid UTF-8 text; exec can only send text")
		}
		s := string(b)
		req.Stdin = &s
	}

	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	// A safety net beyond the command's own timeout: if the answer never
	// comes, giving up closes the connection, and the server kills the command.
	wait := *timeout
	if wait == 0 {
		wait = serverExecTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(wait)*time.Second+time.Minute)
	defer cancel()
	// The output is printed as it comes (exec_stream.go); a server that
	// answers JSON anyway gets the JSON form's handling.
	raw, err := cl.ExecCommand(ctx, rc.agent, req, acceptStreamed)
	if err != nil {
		return c.unreachable(server, err)
	}
	defer raw.Body.Close()
	switch form, boundary := streamed(raw); form {
	case "multipart/mixed":
		return c.execMultipart(raw.Body, boundary, wait)
	case "application/x-ndjson":
		return c.execStreamed(raw.Body, wait)
	}
	resp, err := restapi.ParseExecCommandResponse(raw)
	if err != nil {
		return c.unreachable(server, err)
	}
	res := resp.JSON200
	if res == nil {
		return c.apiError(resp.StatusCode(), resp.Body)
	}
	stdout, stderr := []byte(res.Stdout), []byte(res.Stderr)
	if res.Encoding == restapi.Base64 {
		if stdout, err = base64.StdEncoding.DecodeString(res.Stdout); err != nil {
			return c.fail("the server sent invalid base64 stdout: %v", err)
		}
		if stderr, err = base64.StdEncoding.DecodeString(res.Stderr); err != nil {
			return c.fail("the server sent invalid base64 stderr: %v", err)
		}
	}
	// The command's own output goes through untouched: it is what the
	// operator asked for.
	_, _ = c.stdout.Write(stdout)
	_, _ = c.stderr.Write(stderr)
	return c.execEnded(res.Error, res.TimedOut, res.Truncated, res.ExitCode, res.Success, wait)
}

// execEnded reports how an exec ended and returns agenticctl's exit code.
func (c *cli) execEnded(errMsg *string, timedOut, truncated bool, exitCode int, success bool, wait int) int {
	if errMsg != nil {
		fmt.Fprintf(c.stderr, "agenticctl: the command could not run: %s\n", clean(*errMsg))
	}
	if timedOut {
		fmt.Fprintf(c.stderr, "agenticctl: the command timed out after %d s and was killed\n", wait)
	}
	if truncated {
		fmt.Fprintln(c.stderr, "agenticctl: output was truncated (more than 16 MiB on a stream)")
	}
	code := exitCode
	if code < 0 || code > 255 || (code == 0 && !success) {
		code = exitError
	}
	return code
}
