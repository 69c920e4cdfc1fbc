package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

const whoamiUsage = `Usage:
  agenticctl whoami [--json]
                         who the token is: its name, role, label scope and expiry
                         (GET /api/v1/me; every role may ask)
`

func (c *cli) whoami(args []string) int {
	flags := c.flagSet("agenticctl whoami")
	asJSON := flags.Bool("json", false, "print the answer as JSON")
	if code, done := parseFlags(flags, args, c.stdout, c.stderr, whoamiUsage); done {
		return code
	}
	if flags.NArg() != 0 {
		return c.fail("whoami takes no operands")
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	resp, err := cl.GetMeWithResponse(context.Background())
	if err != nil || resp.JSON200 == nil {
		return c.failed(server, err, resp)
	}
	if *asJSON {
		return c.printJSON(resp.Body)
	}
	me := resp.JSON200
	labels := "- (everything)"
	if len(me.Labels) > 0 {
		var kv []string
		for k, v := range me.Labels {
			kv = append(kv, k+"="+v)
		}
		slices.Sort(kv)
		labels = strings.Join(kv, ",")
	}
	exp := "never"
	if me.ExpiresAt != nil {
		exp = me.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return c.table("", func(w io.Writer) {
		fmt.Fprintf(w, "name:\t%s\n", cell(me.Name))
		fmt.Fprintf(w, "role:\t%s\n", cell(string(me.Role)))
		fmt.Fprintf(w, "labels:\t%s\n", cell(labels))
		fmt.Fprintf(w, "expires:\t%s\n", exp)
	})
}
