package main

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

const poolUsage = `Usage:
  agenticctl pool put --runtime R --size N [env create's spec flags] [--idle-after D] [--delete-after D] NAME
                         keep N environments of this spec ready; an 'env create' with
                         the same runtime and spec takes one at once; an environment
                         taken from it hibernates once unused for --idle-after (default
                         30m where the runtime can hibernate) and is deleted once
                         hibernated or stopped for --delete-after
  agenticctl pool list [--json]
  agenticctl pool get NAME
                         the pool as JSON, with its untaken members
  agenticctl pool rm NAME
                         forget the pool and destroy its untaken members
`

func (c *cli) pools(args []string) int {
	one := func(op string) verb {
		return verb{[]string{op}, func(args []string) int { return c.poolOne(op, args) }}
	}
	return c.group("pool", poolUsage, args,
		verb{[]string{"put", "set"}, c.poolPut},
		verb{[]string{"list", "ls"}, c.poolList},
		one("get"), one("show"), one("rm"), one("delete"))
}

func (c *cli) poolPut(args []string) int {
	flags := c.flagSet("agenticctl pool put")
	runtime := flags.String("runtime", "", "runtime `R` of the members, one of those the server offers ('agenticctl env runtimes')")
	size := flags.Int("size", -1, "how many members to keep ready (0 keeps none)")
	spec := specFlags(flags)
	idle := idleFlags(flags, "an environment taken from the pool")
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
	sp, err := spec.spec()
	if err != nil {
		return c.fail("pool put: %v", err)
	}
	req := restapi.PoolRequest{Runtime: *runtime, Size: *size, Spec: &sp}
	req.IdleAfter, req.DeleteAfter = idle.values()
	resp, err := cl.PutPoolWithResponse(context.Background(), flags.Arg(0), req)
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
	return c.list(*asJSON, resp.Body, "NAME\tRUNTIME\tSIZE\tIDLE\tWARMING\tHITS\tMISSES", func(w io.Writer) {
		for _, p := range resp.JSON200.Pools {
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%d\n", cell(p.Name), cell(p.Runtime), p.Size, p.Idle, p.Warming, p.Hits, p.Misses)
		}
	})
}

func (c *cli) poolOne(op string, args []string) int {
	wrong := fmt.Sprintf("pool %s takes exactly one pool name; 'agenticctl pool list' shows them", op)
	if op != "rm" && op != "delete" {
		return c.showByID("pool "+op, poolUsage, wrong, args, restapi.ClientInterface.GetPool)
	}
	return c.changeByID("pool "+op, poolUsage, wrong, args, restapi.ClientInterface.DeletePool, http.StatusNoContent, "%s deleted\n")
}
