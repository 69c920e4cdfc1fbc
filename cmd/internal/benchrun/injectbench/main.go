// injectbench is the workload of benchrun's inject part: inside a task
// whose ANTHROPIC_API_KEY is injected it times the same requests made
// through $ANTHROPIC_BASE_URL (the agent's endpoint, the server adding the
// key) and straight to the API over TLS, interleaved, and writes one line
// per request to bench.txt:
//
//	<via|direct> <plain|stream> <total µs> <first event µs>
//
// Usage: injectbench N ADDR CA — N requests of each kind and path after a
// warm-up, ADDR the API's address (host:port, TLS name api.anthropic.com),
// CA its CA's PEM file.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

const warmUp = 10

func main() {
	if len(os.Args) != 4 {
		fail(fmt.Errorf("usage: injectbench N ADDR CA"))
	}
	n, err := strconv.Atoi(os.Args[1])
	if err != nil || n < 1 {
		fail(fmt.Errorf("N: %q", os.Args[1]))
	}
	addr := os.Args[2]
	pem, err := os.ReadFile(os.Args[3])
	if err != nil {
		fail(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		fail(fmt.Errorf("no certificate in %s", os.Args[3]))
	}
	_, port, _ := net.SplitHostPort(addr)
	via := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	direct := &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 4,
		ForceAttemptHTTP2:   true, // as the server's own client does
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
	paths := []struct {
		name   string
		client *http.Client
		url    string
		key    string
	}{
		{"via", via, strings.TrimSuffix(os.Getenv("ANTHROPIC_BASE_URL"), "/") + "/v1/messages", os.Getenv("ANTHROPIC_API_KEY")},
		{"direct", direct, "https://api.anthropic.com:" + port + "/v1/messages", "direct"},
	}
	out, err := os.Create("bench.txt")
	if err != nil {
		fail(err)
	}
	defer out.Close()
	w := bufio.NewWriter(out)
	defer w.Flush()
	for i := range warmUp + n {
		for _, stream := range []bool{false, true} {
			// Which path goes first alternates.
			for j := range paths {
				p := paths[(i+j)%len(paths)]
				total, first, err := request(p.client, p.url, p.key, stream)
				if err != nil {
					fail(fmt.Errorf("%s: %w", p.name, err))
				}
				if i >= warmUp {
					kind := "plain"
					if stream {
						kind = "stream"
					}
					fmt.Fprintf(w, "%s %s %d %d\n", p.name, kind, total.Microseconds(), first.Microseconds())
				}
			}
		}
	}
}

// request sends one message request as an SDK does; first is when the
// first streamed event (or, not streamed, the answer's headers) arrived.
func request(c *http.Client, url, key string, stream bool) (total, first time.Duration, err error) {
	body := `{"model":"claude-haiku-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]`
	if stream {
		body += `,"stream":true`
	}
	body += "}"
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("x-api-key", key)
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("content-type", "application/json")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return 0, 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	first = time.Since(start)
	if stream {
		r := bufio.NewReader(resp.Body)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return 0, 0, fmt.Errorf("no event: %w", err)
			}
			if strings.HasPrefix(line, "event:") {
				first = time.Since(start)
				break
			}
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			return 0, 0, err
		}
	} else if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, 0, err
	}
	return time.Since(start), first, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "injectbench:", err)
	os.Exit(2)
}
