package agentd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	sandboxv1 "github.com/agentic-sandbox/agentic-sandbox/gen/agentic/sandbox/v1"
)

// The egress proxy: in an environment without a network device, commands
// reach the hosts the server allows through an HTTP proxy the agent serves
// on loopback (CONNECT for TLS, absolute-form requests for plain HTTP). Each
// connection is a connection of its own to the server upgraded to raw bytes
// (tunnelraw.go) where the server's address takes more than one, else a
// Tunnel stream; either way the server checks the destination and dials
// it.

// EgressEnv is what commands get when the agent serves egress at addr.
func EgressEnv(addr string) map[string]string {
	u := "http://" + addr
	return map[string]string{
		"HTTPS_PROXY": u, "HTTP_PROXY": u, "https_proxy": u, "http_proxy": u,
		"NO_PROXY": "localhost,127.0.0.1", "no_proxy": "localhost,127.0.0.1",
	}
}

type tunnelStream = *connect.BidiStreamForClient[sandboxv1.TunnelRequest, sandboxv1.TunnelResponse]

// ServeEgress accepts proxy connections on ln until ctx ends.
func (a *Agent) ServeEgress(ctx context.Context, ln net.Listener) error {
	go func() { <-ctx.Done(); _ = ln.Close() }()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.proxy(ctx, c)
		}()
	}
}

// proxy serves one client connection: its first request names where to.
func (a *Agent) proxy(ctx context.Context, c net.Conn) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReaderSize(c, 16<<10)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	host, port, head, err := proxyTarget(req)
	if err != nil {
		proxyError(c, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if a.rawTunnels() && a.proxyRaw(ctx, c, br, req, host, port, head) {
		return
	}
	stream := a.files.Tunnel(ctx)
	a.signIn(stream.RequestHeader())
	if err := stream.Send(&sandboxv1.TunnelRequest{Payload: &sandboxv1.TunnelRequest_Open{Open: &sandboxv1.TunnelOpen{Host: host, Port: uint32(port)}}}); err != nil { //nolint:gosec // port checked 1..65535 by proxyTarget
		proxyError(c, http.StatusBadGateway, "the management server cannot be reached: "+err.Error())
		return
	}
	first, err := stream.Receive()
	if err != nil {
		proxyError(c, http.StatusBadGateway, "the management server did not answer: "+err.Error())
		return
	}
	opened := first.GetOpened()
	switch {
	case opened == nil:
		proxyError(c, http.StatusBadGateway, "the management server answered out of turn")
		return
	case !opened.GetAllowed() && opened.GetDenied():
		proxyError(c, http.StatusForbidden, fmt.Sprintf("egress to %s:%d refused: %s", host, port, opened.GetReason()))
		return
	case !opened.GetAllowed():
		proxyError(c, http.StatusBadGateway, fmt.Sprintf("egress to %s:%d failed: %s", host, port, opened.GetReason()))
		return
	}
	if req.Method == http.MethodConnect {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
	} else if err := stream.Send(&sandboxv1.TunnelRequest{Payload: &sandboxv1.TunnelRequest_Data{Data: head}}); err != nil {
		return
	}
	pipeTunnel(c, br, stream)
}

// pipeTunnel copies client ↔ tunnel until both sides are done.
func pipeTunnel(c net.Conn, br *bufio.Reader, stream tunnelStream) {
	done := make(chan struct{})
	go func() { // client → server
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			n, err := br.Read(buf)
			if n > 0 {
				if stream.Send(&sandboxv1.TunnelRequest{Payload: &sandboxv1.TunnelRequest_Data{Data: buf[:n]}}) != nil {
					return
				}
			}
			if err != nil {
				_ = stream.Send(&sandboxv1.TunnelRequest{Payload: &sandboxv1.TunnelRequest_CloseWrite{CloseWrite: true}})
				return
			}
		}
	}()
	clientGone := false
	for { // server → client
		m, err := stream.Receive()
		if err != nil || m.GetEof() {
			break
		}
		if b := m.GetData(); len(b) > 0 {
			if _, err := c.Write(b); err != nil {
				clientGone = true
				break
			}
		}
	}
	if clientGone {
		// Nobody reads any more: reset the stream (closing the response
		// does; cancelling its context does not reach a stream idle on our
		// side), so the server closes the destination now instead of this
		// side draining the rest of a download.
		_ = c.Close()
		_ = stream.CloseResponse()
		<-done
		_ = stream.CloseRequest()
		return
	}
	// The destination is done: the client learns it, and the server that
	// our side is too.
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_ = c.Close()
	<-done
	_ = stream.CloseRequest()
	for {
		if _, err := stream.Receive(); err != nil {
			break
		}
	}
	_ = stream.CloseResponse()
}

// proxyTarget reads where a proxy request goes, and for plain HTTP the
// request to send there (origin-form, one request per connection).
func proxyTarget(req *http.Request) (host string, port int, head []byte, err error) {
	if req.Method == http.MethodConnect {
		h, p, err := net.SplitHostPort(req.Host)
		if err != nil {
			return "", 0, nil, fmt.Errorf("CONNECT %q: want host:port", req.Host)
		}
		port, err := strconv.Atoi(p)
		if err != nil || port < 1 || port > 65535 {
			return "", 0, nil, fmt.Errorf("CONNECT %q: bad port", req.Host)
		}
		return strings.Trim(h, "[]"), port, nil, nil
	}
	if req.ContentLength > 8<<20 || (req.ContentLength < 0 && req.Body != nil && req.Body != http.NoBody) {
		return "", 0, nil, errors.New("plain-HTTP bodies through the proxy are limited to 8 MiB with a Content-Length; use https (CONNECT)")
	}
	u := req.URL
	if u == nil || u.Scheme != "http" || u.Host == "" {
		return "", 0, nil, errors.New("this is a proxy: send CONNECT host:port, or a request with an absolute http:// URL")
	}
	host, port = u.Hostname(), 80
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil || port < 1 || port > 65535 {
			return "", 0, nil, fmt.Errorf("bad port in %q", u.Host)
		}
	}
	req.RequestURI = ""
	req.Header.Del("Proxy-Connection")
	req.Header.Del("Proxy-Authorization")
	req.Header.Set("Connection", "close")
	req.Close = true
	var b strings.Builder
	// Write sends the request in origin-form with its body.
	if err := req.Write(&b); err != nil {
		return "", 0, nil, err
	}
	return host, port, []byte(b.String()), nil
}

func proxyError(c net.Conn, status int, msg string) {
	body := msg + "\n"
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}
