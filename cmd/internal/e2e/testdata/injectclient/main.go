// injectclient stands for a model client (claude) inside an environment
// whose ANTHROPIC_API_KEY is injected: it calls $ANTHROPIC_BASE_URL the way
// an SDK does and writes what it saw into the workspace for the injected
// secrets tests:
//
//	injectclient stream       one streamed request; after the first event it
//	                          asks the API (POST /v1/ack) to send the rest
//	injectclient misuse       the placeholder put in the body, the URL and
//	                          another header: each refused
//	injectclient replay PH    a request with another run's placeholder
//	injectclient spend        requests until refused, then waits to be ended
//
// Always: seen.txt holds every environment and command line it can read
// under /proc (the tests look for the real key there), and results.txt
// one line per request: "<what> <status> <code>".
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

var (
	base    = os.Getenv("ANTHROPIC_BASE_URL")
	key     = os.Getenv("ANTHROPIC_API_KEY")
	results *os.File
)

func main() {
	var err error
	if results, err = os.Create("results.txt"); err != nil {
		fail(err)
	}
	defer results.Close()
	writeSeen()
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: injectclient stream|misuse|replay PH|spend"))
	}
	switch os.Args[1] {
	case "stream":
		stream()
	case "misuse":
		send("body", "/v1/messages", map[string]string{"x-api-key": key}, `{"echo":"`+key+`"}`)
		send("query", "/v1/messages?k="+key, map[string]string{"x-api-key": key}, `{}`)
		send("header", "/v1/messages", map[string]string{"x-api-key": key, "x-echo": key}, `{}`)
	case "replay":
		send("replay", "/v1/messages", map[string]string{"x-api-key": os.Args[2]}, `{}`)
	case "spend":
		for i := 0; i < 20; i++ {
			if send(fmt.Sprintf("spend%d", i), "/v1/messages", map[string]string{"x-api-key": key}, `{}`) != http.StatusOK {
				break
			}
		}
		time.Sleep(10 * time.Minute) // the server ends the run
	default:
		fail(fmt.Errorf("unknown mode %q", os.Args[1]))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "injectclient:", err)
	os.Exit(2)
}

// writeSeen keeps what this user can read of every process's environment
// and command line, and its own environment.
func writeSeen() {
	var b bytes.Buffer
	for _, kv := range os.Environ() {
		b.WriteString("env " + kv + "\n")
	}
	paths, _ := filepath.Glob("/proc/[0-9]*/environ")
	more, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range append(paths, more...) {
		if data, err := os.ReadFile(p); err == nil {
			b.WriteString(p + " " + strings.ReplaceAll(string(data), "\x00", " ") + "\n")
		}
	}
	if err := os.WriteFile("seen.txt", b.Bytes(), 0o644); err != nil {
		fail(err)
	}
}

// send makes one request and notes its status and error code.
func send(what, path string, headers map[string]string, body string) int {
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		fail(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(results, "%s error %v\n", what, err)
		return 0
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e struct{ Code string }
	_ = json.Unmarshal(raw, &e)
	fmt.Fprintf(results, "%s %d %s\n", what, resp.StatusCode, e.Code)
	return resp.StatusCode
}

// stream reads a streamed answer event by event; the API holds its second
// event until asked for it, which only a client that got the first can do.
func stream() {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(`{"stream":true}`))
	req.Header.Set("x-api-key", key)
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fail(err)
	}
	defer resp.Body.Close()
	fmt.Fprintf(results, "stream %d %s\n", resp.StatusCode, resp.Header.Get("Content-Type"))
	sc := bufio.NewScanner(resp.Body)
	acked := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "event: ") {
			continue
		}
		fmt.Fprintf(results, "event %s\n", strings.TrimPrefix(line, "event: "))
		if !acked {
			acked = true
			send("ack", "/v1/ack", map[string]string{"x-api-key": key}, `{}`)
		}
	}
}
