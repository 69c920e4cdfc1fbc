package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// execPoster returns a function posting an exec body to the host agent of
// srv with an optional Accept, answering the response of a 200 (any other
// status is an error with its body). Its client reads 64 KiB at a time, as
// a client streaming large answers would: with the default 4 KiB, a
// multipart reader's reads are one system call each.
func execPoster(srv *harness.Server) func(body, accept string) (*http.Response, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, ReadBufferSize: 64 << 10}}
	return func(body, accept string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, srv.RESTURL+"/api/v1/agents/host-01/exec", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+srv.Token)
		req.Header.Set("Content-Type", "application/json")
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return nil, fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		return resp, nil
	}
}
