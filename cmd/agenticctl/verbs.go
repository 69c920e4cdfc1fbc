package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// The steps every command group's verbs share, written once so that help,
// mistakes and answers read the same in all of them.

// verb is one subcommand of a command group: the names it answers to (its
// own, then its aliases) and what runs it on the arguments after the name.
type verb struct {
	names []string
	run   func(args []string) int
}

// group runs the verb args[0] names. No verb or an unknown one prints the
// group's usage on stderr and fails; help prints it on stdout.
func (c *cli) group(name, usage string, args []string, verbs ...verb) int {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, usage)
		return exitError
	}
	if run := lookup(verbs, args[0]); run != nil {
		return run(args[1:])
	}
	if slices.Contains([]string{"-h", "-help", "--help", "help"}, args[0]) {
		fmt.Fprint(c.stdout, usage)
		return 0
	}
	fmt.Fprintf(c.stderr, "agenticctl: unknown %s command %q\n%s", name, args[0], usage)
	return exitError
}

// lookup is what runs the verb named word, nil when no verb has that name.
func lookup(verbs []verb, word string) func(args []string) int {
	for _, v := range verbs {
		if slices.Contains(v.names, word) {
			return v.run
		}
	}
	return nil
}

// operands parses args into flags and checks that n operands follow them.
// When ok is false the verb is over with code: help was asked for, or the
// arguments were wrong (explained with wrong).
func (c *cli) operands(flags *flag.FlagSet, usage string, args []string, n int, wrong string) (code int, ok bool) {
	if code, done := parseFlags(flags, args, c.stdout, c.stderr, usage); done {
		return code, false
	}
	if flags.NArg() != n {
		return c.fail("%s", wrong), false
	}
	return 0, true
}

// oneArg parses the arguments of the verb "agenticctl name", which has no
// flags and one operand, as operands does.
func (c *cli) oneArg(name, usage, wrong string, args []string) (arg string, code int, ok bool) {
	flags := c.flagSet("agenticctl " + name)
	if code, ok := c.operands(flags, usage, args, 1, wrong); !ok {
		return "", code, false
	}
	return flags.Arg(0), 0, true
}

// idCall is a generated client call about one thing named by its id or
// name, as a method expression (restapi.ClientInterface.GetAgent).
type idCall func(restapi.ClientInterface, context.Context, string, ...restapi.RequestEditorFn) (*http.Response, error)

// callID sends call about id and returns the answer's body when its status
// is want; otherwise ok is false and the failure is explained, with code
// the exit status.
func (c *cli) callID(cl restapi.ClientInterface, server, id string, call idCall, want int) (body []byte, code int, ok bool) {
	resp, err := call(cl, context.Background(), id)
	if err != nil {
		return nil, c.unreachable(server, err), false
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		return nil, c.fail("reading the answer: %v", err), false
	}
	if resp.StatusCode != want {
		return nil, c.apiError(resp.StatusCode, body), false
	}
	return body, 0, true
}

// byID is a verb about one thing named by the one id in args: it sends
// call, wants the status want, and hands the answer's body to then.
func (c *cli) byID(name, usage, wrong string, args []string, call idCall, want int, then func(id string, body []byte) int) int {
	id, code, ok := c.oneArg(name, usage, wrong, args)
	if !ok {
		return code
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	body, code, ok := c.callID(cl, server, id, call, want)
	if !ok {
		return code
	}
	return then(id, body)
}

// showByID is a "get ID" verb: it prints as JSON what get answers.
func (c *cli) showByID(name, usage, wrong string, args []string, get idCall) int {
	return c.byID(name, usage, wrong, args, get, http.StatusOK, func(_ string, body []byte) int {
		return c.printJSON(body)
	})
}

// changeByID is a verb that changes one thing: it sends call, wants the
// status want, and says said (of the id).
func (c *cli) changeByID(name, usage, wrong string, args []string, call idCall, want int, said string) int {
	return c.byID(name, usage, wrong, args, call, want, func(id string, _ []byte) int {
		fmt.Fprintf(c.stdout, said, clean(id))
		return 0
	})
}

// list is a list verb's answer: the server's JSON body as it is with
// --json, else the table of header and rows.
func (c *cli) list(asJSON bool, body []byte, header string, rows func(w io.Writer)) int {
	if asJSON {
		return c.printJSON(body)
	}
	return c.table(header, rows)
}

// table writes header (if any) and the rows rows writes as an aligned table
// on stdout.
func (c *cli) table(header string, rows func(w io.Writer)) int {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	if header != "" {
		fmt.Fprintln(tw, header)
	}
	rows(tw)
	if err := tw.Flush(); err != nil {
		return c.fail("writing the table: %v", err)
	}
	return 0
}

// remoteCommand is what exec and sessions create run: on agent, command
// with args, in env (args and env nil when there are none).
type remoteCommand struct {
	agent, command string
	args           *[]string
	env            *map[string]string
}

// remoteCommand reads verb's operands, "[--] AGENT [--] CMD [ARGS…]", and
// its --env values. When ok is false the verb is over with code: what is
// wrong is explained, with ex as an example command.
func (c *cli) remoteCommand(verb, ex string, operands []string, envs multiFlag) (rc remoteCommand, code int, ok bool) {
	agent, cmdline, found := agentCommand(operands)
	if !found {
		return rc, c.fail("%s needs an agent and a command, e.g. 'agenticctl %s host-01 -- %s'", verb, verb, ex), false
	}
	if len(cmdline) == 0 || cmdline[0] == "" {
		return rc, c.fail("%s needs a command after the agent, e.g. 'agenticctl %s %s -- %s'", verb, verb, agent, ex), false
	}
	env, err := envVars(envs)
	if err != nil {
		return rc, c.fail("%v", err), false
	}
	rc = remoteCommand{agent: agent, command: cmdline[0], env: env}
	if len(cmdline) > 1 {
		a := cmdline[1:]
		rc.args = &a
	}
	return rc, 0, true
}

// agentAlone is the agent of operands that name only one ("AGENT",
// "-- AGENT", "AGENT --" or "-- AGENT --").
func agentAlone(operands []string) (string, bool) {
	if len(operands) > 0 && operands[0] == "--" {
		operands = operands[1:]
	}
	if len(operands) == 2 && operands[1] == "--" {
		operands = operands[:1]
	}
	if len(operands) != 1 || operands[0] == "" {
		return "", false
	}
	return operands[0], true
}

// agentCommand splits the operands "[--] AGENT [--] CMD [ARGS…]"; ok is
// false when there are not two.
func agentCommand(operands []string) (agent string, cmdline []string, ok bool) {
	if len(operands) > 0 && operands[0] == "--" {
		operands = operands[1:]
	}
	if len(operands) < 2 {
		return "", nil, false
	}
	agent, cmdline = operands[0], operands[1:]
	if cmdline[0] == "--" {
		cmdline = cmdline[1:]
	}
	return agent, cmdline, true
}

// envVars turns the repeated --env KEY=VALUE into a request's environment,
// nil when there are none.
func envVars(kvs multiFlag) (*map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--env %q: write it as KEY=VALUE", kv)
		}
		m[k] = v
	}
	return &m, nil
}
