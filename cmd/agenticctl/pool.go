package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

const poolUsage = `Usage:
  agenticctl pool put --runtime R --size N [env create's spec flags] NAME
                         keep N environments of this spec ready; an 'env create' with
                         the same runtime and spec takes one at once
  agenticctl pool list [--json]
  agenticctl pool get NAME
                         the pool as JSON, with its untaken members
  agenticctl pool rm NAME
                         forget the pool and destroy its untaken members
`

func (c *cli) pools(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, poolUsage)
		return exitError
	}
	switch args[0] {
	case "put", "set":
		return c.poolPut(args[1:])
	case "list", "ls":
		return c.poolList(args[1:])
	case "get", "show", "rm", "delete":
		return c.poolOne(args[0], args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(c.stdout, poolUsage)
		return 0
	default:
		fmt.Fprintf(c.stderr, "agenticctl: unknown pool command %q\n%s", args[0], poolUsage)
		return exitError
	}
}

func (c *cli) poolPut(args []string) int {
	flags := c.flagSet("agenticctl pool put")
	runtime := flags.String("runtime", "", "runtime `R` of the members: host, docker or libvirt")
	size := flags.Int("size", -1, "how many members to keep ready (0 keeps none)")
	spec := specFlags(flags)
	if code, done := parseFlags(flags, args, c.stdout, c.stderr, poolUsage); done {
		return code
	}
	if flags.NArg() != 1 || *runtime == "" || *size < 0 {
		return c.fail("pool put takes --runtime, --size and one NAME; run 'agenticctl pool help'")
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	sp := spec.spec()
	resp, err := cl.PutPoolWithResponse(context.Background(), flags.Arg(0), restapi.PoolRequest{Runtime: *runtime, Size: *size, Spec: &sp})
	if err != nil || resp.JSON200 == nil {
		return c.failed(server, err, resp)
	}
	p := resp.JSON200
	fmt.Fprintf(c.stdout, "%s: %d of %d ready (members are provisioned in the background)\n", clean(p.Name), p.Idle, p.Size)
	return 0
}

func (c *cli) poolList(args []string) int {
	flags := c.flagSet("agenticctl pool list")
	asJSON := flags.Bool("json", false, "print the list as JSON")
	if code, done := parseFlags(flags, args, c.stdout, c.stderr, poolUsage); done {
		return code
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	resp, err := cl.ListPoolsWithResponse(context.Background())
	if err != nil || resp.JSON200 == nil {
		return c.failed(server, err, resp)
	}
	if *asJSON {
		return c.printJSON(resp.Body)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tRUNTIME\tSIZE\tIDLE\tWARMING\tHITS\tMISSES")
	for _, p := range resp.JSON200.Pools {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\n", cell(p.Name), cell(p.Runtime), p.Size, p.Idle, p.Warming, p.Hits, p.Misses)
	}
	if err := tw.Flush(); err != nil {
		return c.fail("writing the table: %v", err)
	}
	return 0
}

func (c *cli) poolOne(op string, args []string) int {
	flags := c.flagSet("agenticctl pool " + op)
	if code, done := parseFlags(flags, args, c.stdout, c.stderr, poolUsage); done {
		return code
	}
	if flags.NArg() != 1 {
		return c.fail("pool %s takes exactly one pool name; 'agenticctl pool list' shows them", op)
	}
	name := flags.Arg(0)
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	if op == "rm" || op == "delete" {
		r, err := cl.DeletePoolWithResponse(context.Background(), name)
		if err != nil {
			return c.unreachable(server, err)
		}
		if r.StatusCode() != 204 {
			return c.apiError(r.StatusCode(), r.Body)
		}
		fmt.Fprintf(c.stdout, "%s deleted\n", clean(name))
		return 0
	}
	r, err := cl.GetPoolWithResponse(context.Background(), name)
	if err != nil || r.JSON200 == nil {
		return c.failed(server, err, r)
	}
	return c.printJSON(r.Body)
}
