package agentd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/agentwire"
)

// A forwarded connection on a connection of its own to the server (see
// agentrpc's ForwardRawPath): raw bytes after an HTTP/1.1 upgrade, so they
// move without per-chunk messages, and between two sockets the kernel
// splices them.

// rawUpgradeTimeout bounds the upgrade (agentwire.ForwardRawPath) of a
// connection of its own.
const rawUpgradeTimeout = 15 * time.Second

// rawDialer opens a new connection to the server where its address allows
// more than one: http:// (TCP), https:// (TLS, HTTP/1.1 by ALPN) and a
// unix:// socket that takes two; nil for a serial link or a relayed one.
func rawDialer(server, caFile string, unixTakesTwo bool) (func(context.Context) (net.Conn, error), error) {
	u, err := url.Parse(server)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: 10 * time.Second}
	switch {
	case u.Scheme == "http" && u.Host != "":
		return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", u.Host) }, nil
	case u.Scheme == "https" && u.Host != "":
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Hostname(), NextProtos: []string{"http/1.1"}}
		if caFile != "" {
			pool, err := managementCA(caFile)
			if err != nil {
				return nil, err
			}
			cfg.RootCAs = pool
		}
		td := &tls.Dialer{NetDialer: d, Config: cfg}
		return func(ctx context.Context) (net.Conn, error) { return td.DialContext(ctx, "tcp", u.Host) }, nil
	case u.Scheme == "unix" && u.Path != "" && unixTakesTwo:
		return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", u.Path) }, nil
	}
	return nil, nil
}

// openRawForward opens a connection of its own for the dial forwardID and
// upgrades it; what the server sent after its answer is read first.
func (a *Agent) openRawForward(ctx context.Context, forwardID string) (net.Conn, io.Reader, error) {
	conn, br, resp, err := a.rawUpgrade(ctx, agentwire.ForwardRawPath, agentwire.ForwardRawProtocol, agentwire.HeaderForwardID, forwardID)
	if err != nil {
		return nil, nil, err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("the server answered %s", resp.Status)
	}
	_ = conn.SetDeadline(time.Time{})
	var r io.Reader = conn
	if n := br.Buffered(); n > 0 {
		early, _ := br.Peek(n)
		r = io.MultiReader(bytes.NewReader(bytes.Clone(early)), conn)
	}
	return conn, r, nil
}

// rawUpgrade opens a connection of the agent's own to the server and asks
// it, signed in and with the headers named and valued in pairs, to switch
// path to protocol; it returns the server's answer (its body unread), with
// the connection's deadline still set. On an error the connection is closed.
func (a *Agent) rawUpgrade(ctx context.Context, path, protocol string, headerValues ...string) (net.Conn, *bufio.Reader, *http.Response, error) {
	conn, err := a.rawDial(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(rawUpgradeTimeout))
	h := http.Header{}
	a.signIn(h)
	for i := 0; i+1 < len(headerValues); i += 2 {
		h.Set(headerValues[i], headerValues[i+1])
	}
	h.Set("Connection", "Upgrade")
	h.Set("Upgrade", protocol)
	var req bytes.Buffer
	req.WriteString("GET " + path + " HTTP/1.1\r\nHost: agentic-sandbox\r\n")
	_ = h.Write(&req)
	req.WriteString("\r\n")
	if _, err := conn.Write(req.Bytes()); err != nil {
		_ = conn.Close()
		return nil, nil, nil, err
	}
	br := bufio.NewReaderSize(conn, 4<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		_ = conn.Close()
		return nil, nil, nil, err
	}
	return conn, br, resp, nil
}

// pipeRaw copies port ↔ raw until both directions end: the end of one
// side's bytes half-closes the other's write side; an error ends both.
func pipeRaw(port, raw net.Conn, rawR io.Reader) {
	var wg sync.WaitGroup
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = port.Close()
			_ = raw.Close()
		})
	}
	oneWay := func(dst net.Conn, src io.Reader) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err == nil {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				return
			}
		}
		closeBoth()
	}
	wg.Add(2)
	go oneWay(raw, port)
	go oneWay(port, rawR)
	wg.Wait()
	closeBoth()
}

// errNoRawForward: the server's address takes one connection only.
var errNoRawForward = errors.New("no connection of its own to the server")

// forwardRaw carries c on a connection of its own when it can.
func (a *Agent) forwardRaw(ctx context.Context, forwardID string, c net.Conn) error {
	if a.rawDial == nil {
		return errNoRawForward
	}
	raw, r, err := a.openRawForward(ctx, forwardID)
	if err != nil {
		return err
	}
	pipeRaw(c, raw, r)
	return nil
}
