package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/client"
)

// A program that lists the agents, runs a command on one and tells a
// refusal by its code. AGENTIC_URL is the server's REST address and
// AGENTIC_TOKEN the operator's token (agentic-mgmt --print-token).
func Example() {
	c, err := client.New(os.Getenv("AGENTIC_URL"), client.WithToken(os.Getenv("AGENTIC_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	list, err := c.ListAgentsWithResponse(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, a := range list.JSON200.Agents {
		fmt.Println(a.Id, a.Status, a.Runtime)
	}

	res, err := c.ExecCommandWithResponse(ctx, "host-01", client.ExecRequest{
		Command: "uname",
		Args:    client.Ptr([]string{"-a"}),
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("exit %d: %s", res.JSON200.ExitCode, res.JSON200.Stdout)

	_, err = c.GetAgentWithResponse(ctx, "no-such-agent")
	var apiErr *client.APIError
	if errors.As(err, &apiErr) && apiErr.Code == "agent_not_found" {
		fmt.Println("no such agent:", apiErr.Message)
	}
}

// Refusals are *APIError values; ErrorCode reads the code from any error.
func ExampleErrorCode() {
	c, err := client.New("http://127.0.0.1:8122", client.WithToken("not-the-token"))
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.ListEnvironmentsWithResponse(context.Background(), nil)
	switch client.ErrorCode(err) {
	case "":
		// Success, or no answer at all (err is then the transport's).
	case "unauthorized":
		log.Fatal("wrong token: agentic-mgmt --print-token prints the right one")
	default:
		log.Fatal(err)
	}
}

// WithHTTPClient sets the transport, for TLS settings or a proxy.
func ExampleWithHTTPClient() {
	c, err := client.New("https://sandbox.example.com",
		client.WithToken(os.Getenv("AGENTIC_TOKEN")),
		client.WithHTTPClient(&http.Client{Transport: http.DefaultTransport}),
	)
	if err != nil {
		log.Fatal(err)
	}
	_ = c
}
