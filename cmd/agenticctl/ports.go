package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// The ports of an environment: the list with previews, public marks, and
// port-forward (GET …/ports/{port}/forward, an HTTP/1.1 upgrade to the
// port's TCP stream).

const portsUsage = `Usage:
  agenticctl ports [--json] ENVIRONMENT
                         the TCP ports listening inside it (PORT ADDRESS PROCESS PUBLIC PREVIEW)
`

const portUsage = `Usage:
  agenticctl port public [--ttl 1h] ENVIRONMENT PORT
                         let anyone open the port's preview URL without signing in, until the
                         ttl ends (1m to 720h; default 1h); again to renew
  agenticctl port private ENVIRONMENT PORT
                         its preview needs sign-in again
`

const portForwardUsage = `Usage:
  agenticctl port-forward [--address 127.0.0.1] ENVIRONMENT LOCAL:REMOTE [LOCAL:REMOTE…]
                         listen on each LOCAL port and carry its connections to the REMOTE
                         port inside the environment, through the server, until Ctrl-C;
                         PORT alone is the same port both sides, :REMOTE any free local port
`

// forwardProtocol is the Upgrade token of the forward route.
const forwardProtocol = "agentic-port-forward"

// portForwardContext is how long port-forward runs: until SIGINT or
// SIGTERM (a variable so tests can end it).
var portForwardContext = func() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// interleaved parses flags that may come before, between or after the
// operands ("port public dev 5173 --ttl 2h"), and returns the operands.
// When ok is false the verb is over with code.
func (c *cli) interleaved(flags *flag.FlagSet, usage string, args []string) (operands []string, code int, ok bool) {
	for {
		if code, done := parseFlags(flags, args, c.stdout, c.stderr, usage); done {
			return nil, code, false
		}
		rest := flags.Args()
		if len(rest) == 0 {
			return operands, 0, true
		}
		operands = append(operands, rest[0])
		args = rest[1:]
	}
}

func (c *cli) ports(args []string) int {
	flags := c.flagSet("agenticctl ports")
	asJSON := flags.Bool("json", false, "print the list as JSON")
	operands, code, ok := c.interleaved(flags, portsUsage, args)
	if !ok {
		return code
	}
	if len(operands) != 1 {
		return c.fail("ports takes one environment, e.g. 'agenticctl ports dev'")
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	resp, err := cl.ListEnvironmentPortsWithResponse(context.Background(), operands[0])
	if err != nil || resp.JSON200 == nil {
		return c.failed(server, err, resp)
	}
	return c.list(*asJSON, resp.Body, "PORT\tADDRESS\tPROCESS\tPUBLIC\tPREVIEW", func(w io.Writer) {
		for _, p := range resp.JSON200.Ports {
			public := "no"
			if p.Public {
				public = "yes"
				if p.PublicUntil != nil {
					public = "until " + p.PublicUntil.UTC().Format(time.RFC3339)
				}
			}
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", p.Port, cell(p.Address), cell(deref(p.Process)), public, cell(deref(p.PreviewUrl)))
		}
	})
}

func (c *cli) port(args []string) int {
	return c.group("port", portUsage, args,
		verb{[]string{"public"}, c.portPublic},
		verb{[]string{"private"}, c.portPrivate})
}

// portOperands reads "ENVIRONMENT PORT".
func (c *cli) portOperands(verb string, operands []string) (env string, port int, code int, ok bool) {
	if len(operands) != 2 {
		return "", 0, c.fail("port %s takes an environment and a port, e.g. 'agenticctl port %s dev 5173'", verb, verb), false
	}
	port, err := strconv.Atoi(operands[1])
	if err != nil || port < 1 || port > 65535 {
		return "", 0, c.fail("port %s: %q is not a TCP port (1 to 65535)", verb, operands[1]), false
	}
	return operands[0], port, 0, true
}

func (c *cli) portPublic(args []string) int {
	flags := c.flagSet("agenticctl port public")
	ttl := flags.Duration("ttl", time.Hour, "how long it stays public (1m to 720h)")
	operands, code, ok := c.interleaved(flags, portUsage, args)
	if !ok {
		return code
	}
	env, port, code, ok := c.portOperands("public", operands)
	if !ok {
		return code
	}
	if *ttl < time.Minute || *ttl > 720*time.Hour {
		return c.fail("port public: --ttl %v: from 1m to 720h (30 days)", *ttl)
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	secs := int(ttl.Round(time.Second) / time.Second)
	resp, err := cl.MakePortPublicWithResponse(context.Background(), env, port, restapi.PublicPortRequest{TtlSeconds: &secs})
	if err != nil || resp.JSON200 == nil {
		return c.failed(server, err, resp)
	}
	fmt.Fprintf(c.stdout, "port %d of %s is public until %s ('agenticctl ports %s' shows its preview URL)\n",
		port, clean(env), resp.JSON200.PublicUntil.UTC().Format(time.RFC3339), clean(env))
	return 0
}

func (c *cli) portPrivate(args []string) int {
	flags := c.flagSet("agenticctl port private")
	operands, code, ok := c.interleaved(flags, portUsage, args)
	if !ok {
		return code
	}
	env, port, code, ok := c.portOperands("private", operands)
	if !ok {
		return code
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	resp, err := cl.MakePortPrivateWithResponse(context.Background(), env, port)
	if err != nil || resp.StatusCode() != http.StatusNoContent {
		return c.failed(server, err, resp)
	}
	fmt.Fprintf(c.stdout, "port %d of %s is private\n", port, clean(env))
	return 0
}

// forwardPair is one LOCAL:REMOTE of port-forward.
type forwardPair struct {
	local  int // 0: any free port
	remote int
}

func parsePair(s string) (forwardPair, error) {
	local, remote, two := strings.Cut(s, ":")
	if !two {
		remote = local
	}
	var p forwardPair
	var err error
	if p.remote, err = strconv.Atoi(remote); err != nil || p.remote < 1 || p.remote > 65535 {
		return p, fmt.Errorf("%q: the remote port must be 1 to 65535 (write LOCAL:REMOTE, PORT or :REMOTE)", s)
	}
	if local == "" && two {
		return p, nil // any free local port
	}
	if p.local, err = strconv.Atoi(local); err != nil || p.local < 1 || p.local > 65535 {
		return p, fmt.Errorf("%q: the local port must be 1 to 65535 (write LOCAL:REMOTE, PORT or :REMOTE)", s)
	}
	return p, nil
}

// syncWriter lets the connections of port-forward write one line at a time.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

func (c *cli) portForward(args []string) int {
	flags := c.flagSet("agenticctl port-forward")
	address := flags.String("address", "127.0.0.1", "the local `ADDRESS` to listen on")
	operands, code, ok := c.interleaved(flags, portForwardUsage, args)
	if !ok {
		return code
	}
	if len(operands) < 2 {
		return c.fail("port-forward takes an environment and LOCAL:REMOTE ports, e.g. 'agenticctl port-forward dev 8080:5173'")
	}
	env := operands[0]
	var pairs []forwardPair
	for _, s := range operands[1:] {
		p, err := parsePair(s)
		if err != nil {
			return c.fail("port-forward: %v", err)
		}
		pairs = append(pairs, p)
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	token, err := c.resolveToken()
	if err != nil {
		return c.fail("%v", err)
	}
	// A name that is wrong, or a token, is said once, now, rather than
	// at each connection.
	got, err := cl.GetEnvironmentWithResponse(context.Background(), env)
	if err != nil || got.JSON200 == nil {
		return c.failed(server, err, got)
	}
	ctx, stop := portForwardContext()
	defer stop()
	out := &syncWriter{w: c.stdout}
	lc := *c
	lc.stdout, lc.stderr = out, &syncWriter{w: c.stderr}
	f := &forwarder{cli: &lc, server: server, token: token, env: env}

	var listeners []net.Listener
	defer func() {
		for _, ln := range listeners {
			_ = ln.Close()
		}
	}()
	for _, p := range pairs {
		var lcfg net.ListenConfig
		ln, err := lcfg.Listen(ctx, "tcp", net.JoinHostPort(*address, strconv.Itoa(p.local)))
		if err != nil {
			return c.fail("port-forward: listening for %d: %v", p.remote, err)
		}
		listeners = append(listeners, ln)
	}
	var wg sync.WaitGroup
	for i, ln := range listeners {
		fmt.Fprintf(out, "Forwarding from %s -> %d\n", ln.Addr(), pairs[i].remote)
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.serve(ctx, ln, pairs[i].remote, &wg)
		}()
	}
	<-ctx.Done()
	for _, ln := range listeners {
		_ = ln.Close()
	}
	wg.Wait()
	return 0
}

// forwarder carries the connections of one port-forward.
type forwarder struct {
	cli    *cli
	server string
	token  string
	env    string
}

// serve accepts on ln until it is closed, each connection carried to
// remote; wg counts the connections too.
func (f *forwarder) serve(ctx context.Context, ln net.Listener, remote int, wg *sync.WaitGroup) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				fmt.Fprintf(f.cli.stderr, "agenticctl: port-forward: accepting on %s: %v\n", ln.Addr(), err)
			}
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.carry(ctx, conn, remote)
		}()
	}
}

// carry opens the forward to remote for one local connection and copies
// both ways until both are done; a refusal is printed and only this
// connection ends.
func (f *forwarder) carry(ctx context.Context, local net.Conn, remote int) {
	defer local.Close()
	what := fmt.Sprintf("port-forward %s -> %d", local.LocalAddr(), remote)
	stream, halfCloser, err := f.open(ctx, remote)
	if err != nil {
		if ctx.Err() != nil {
			return // ending: not this connection's failure
		}
		fmt.Fprintf(f.cli.stderr, "agenticctl: %s: %v\n", what, err)
		return
	}
	defer stream.Close()
	// Ctrl-C ends the connections too.
	stopOnCancel := context.AfterFunc(ctx, func() {
		_ = local.Close()
		_ = stream.Close()
	})
	defer stopOnCancel()
	var (
		wg   sync.WaitGroup
		once sync.Once
	)
	closeBoth := func() {
		once.Do(func() {
			_ = local.Close()
			_ = stream.Close()
		})
	}
	wg.Add(2)
	go func() { // local -> remote
		defer wg.Done()
		if _, err := io.Copy(stream, local); err == nil && halfCloser != nil && halfCloser.CloseWrite() == nil {
			return
		}
		closeBoth()
	}()
	go func() { // remote -> local
		defer wg.Done()
		if _, err := io.Copy(local, stream); err == nil {
			if tc, ok := local.(interface{ CloseWrite() error }); ok && tc.CloseWrite() == nil {
				return
			}
		}
		closeBoth()
	}()
	wg.Wait()
	closeBoth()
}

// open asks the server for the stream to remote: the upgrade request, with
// the CLI's server, token and TLS (the system's roots), over HTTP/1.1.
// halfCloser, when not nil, ends the write side of the stream.
func (f *forwarder) open(ctx context.Context, remote int) (stream io.ReadWriteCloser, halfCloser interface{ CloseWrite() error }, err error) {
	req, err := restapi.NewForwardPortRequest(f.server, f.env, remote)
	if err != nil {
		return nil, nil, err
	}
	req = req.WithContext(ctx)
	req.Header.Set("Authorization", "Bearer "+f.token)
	req.Header.Set("User-Agent", "agenticctl")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", forwardProtocol)

	// The connection the stream will run on, to end its write side: the
	// TCP one for http, the TLS one for https (not the TCP under a proxy's
	// TLS, which cannot end the stream's writes alone).
	var (
		mu     sync.Mutex
		dialed interface{ CloseWrite() error }
	)
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ForceAttemptHTTP2 = false
	t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // HTTP/1.1: only it upgrades
	t.DisableKeepAlives = true
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok && err == nil && req.URL.Scheme == "http" {
			mu.Lock()
			dialed = tc
			mu.Unlock()
		}
		return c, err
	}
	t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		cfg := &tls.Config{}
		if t.TLSClientConfig != nil {
			cfg = t.TLSClientConfig.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = req.URL.Hostname()
		}
		cfg.NextProtos = []string{"http/1.1"}
		c, err := (&tls.Dialer{NetDialer: dialer, Config: cfg}).DialContext(ctx, network, addr)
		if tc, ok := c.(*tls.Conn); ok && err == nil {
			mu.Lock()
			dialed = tc
			mu.Unlock()
		}
		return c, err
	}
	resp, err := (&http.Client{Transport: t}).Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach the server at %s: %v", f.server, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, nil, errors.New(apiErrorText(resp.StatusCode, body))
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		_ = resp.Body.Close()
		return nil, nil, errors.New("the server switched protocols but the connection cannot be written")
	}
	mu.Lock()
	defer mu.Unlock()
	return rwc, dialed, nil
}

// apiErrorText is an error answer in a line: its message, code and status.
func apiErrorText(status int, body []byte) string {
	var e restapi.Error
	if err := json.Unmarshal(body, &e); err != nil || e.Code == "" {
		return fmt.Sprintf("unexpected answer from the server (HTTP %d): %s", status, clip(string(body)))
	}
	return fmt.Sprintf("%s (%s, HTTP %d)", clean(e.Error), e.Code, status)
}
