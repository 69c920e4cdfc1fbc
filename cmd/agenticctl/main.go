// Command agenticctl is the operator CLI of agentic-sandbox, built on the
// generated REST client.
//
// Exit status: agenticctl exec exits with the remote command's exit code.
// Any usage error or API error (bad token, unknown agent, unreachable
// server, …) exits 1 with a message on stderr, so a 1 from exec means
// "look at stderr": it is either the command's own 1 or agenticctl's.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}
