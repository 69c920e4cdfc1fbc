package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

//nolint:gosec // G101: help text that names tokens, no credential
const tokenUsage = `Usage:
  agenticctl token create NAME --role viewer|operator|admin|executor [--expires 24h] [--label k=v]…
                         make a named token (admins only); its secret is printed once,
                         the server keeps only a hash
  agenticctl token list [--json]
                         the named tokens, without their secrets
  agenticctl token revoke ID|NAME
                         revoke a token: it is refused from its next request on

Roles: viewer (every read), operator (everything but tokens and the audit log),
admin (everything), executor (dispatch, HITL answers, mission reads, aiwg status).
`

func (c *cli) tokens(args []string) int {
	return c.group("token", tokenUsage, args,
		verb{[]string{"create", "new"}, c.tokenCreate},
		verb{[]string{"list", "ls"}, c.tokenList},
		verb{[]string{"revoke", "rm", "delete"}, c.tokenRevoke})
}

func (c *cli) tokenCreate(args []string) int {
	flags := c.flagSet("agenticctl token create")
	role := flags.String("role", "", "the token's `ROLE`: viewer, operator, admin or executor")
	expires := flags.Duration("expires", 0, "the token stops working after `D` (e.g. 24h; 0: never)")
	var labels multiFlag
	flags.Var(&labels, "label", "a label `k=v` of the token's scope (repeatable)")
	// The name may come before the flags or after them.
	var operands []string
	rest := args
	for {
		if code, done := parseFlags(flags, rest, c.stdout, c.stderr, tokenUsage); done {
			return code
		}
		if flags.NArg() == 0 {
			break
		}
		operands = append(operands, flags.Arg(0))
		rest = flags.Args()[1:]
	}
	if len(operands) != 1 || *role == "" {
		return c.fail("token create takes one NAME and --role; run 'agenticctl token help'")
	}
	if *expires < 0 {
		return c.fail("--expires %s: want a positive duration, e.g. 24h", *expires)
	}
	req := restapi.TokenRequest{Name: operands[0], Role: restapi.TokenRole(*role)}
	if *expires > 0 {
		at := time.Now().Add(*expires).UTC().Truncate(time.Second)
		req.ExpiresAt = &at
	}
	if len(labels) > 0 {
		m := restapi.TokenLabels{}
		for _, kv := range labels {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return c.fail("--label %q: write it as KEY=VALUE", kv)
			}
			m[k] = v
		}
		req.Labels = &m
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	resp, err := cl.CreateTokenWithResponse(context.Background(), req)
	if err != nil || resp.JSON201 == nil {
		return c.failed(server, err, resp)
	}
	t := resp.JSON201
	// The secret on stdout alone, so that it can be captured; what it is
	// on stderr.
	fmt.Fprintln(c.stdout, t.Token)
	exp := "never expires"
	if t.ExpiresAt != nil {
		exp = "expires " + t.ExpiresAt.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(c.stderr, "token %s (%s), role %s, %s: the secret above is shown only now\n", clean(t.Name), clean(t.Id), clean(string(t.Role)), exp)
	return 0
}

func (c *cli) tokenList(args []string) int {
	flags := c.flagSet("agenticctl token list")
	asJSON := flags.Bool("json", false, "print the list as JSON")
	if code, done := parseFlags(flags, args, c.stdout, c.stderr, tokenUsage); done {
		return code
	}
	if flags.NArg() != 0 {
		return c.fail("token list takes no operands")
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	resp, err := cl.ListTokensWithResponse(context.Background())
	if err != nil || resp.JSON200 == nil {
		return c.failed(server, err, resp)
	}
	return c.list(*asJSON, resp.Body, "NAME\tID\tROLE\tEXPIRES\tLABELS", func(w io.Writer) {
		for _, t := range resp.JSON200.Tokens {
			exp := "-"
			if t.ExpiresAt != nil {
				exp = t.ExpiresAt.UTC().Format(time.RFC3339)
			}
			labels := "-"
			if t.Labels != nil && len(*t.Labels) > 0 {
				var kv []string
				for k, v := range *t.Labels {
					kv = append(kv, k+"="+v)
				}
				slices.Sort(kv)
				labels = strings.Join(kv, ",")
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", cell(t.Name), cell(t.Id), cell(string(t.Role)), exp, cell(labels))
		}
	})
}

func (c *cli) tokenRevoke(args []string) int {
	return c.changeByID("token revoke", tokenUsage, "token revoke takes exactly one token id or name; 'agenticctl token list' shows them",
		args, restapi.ClientInterface.DeleteToken, http.StatusNoContent, "token %s revoked\n")
}
