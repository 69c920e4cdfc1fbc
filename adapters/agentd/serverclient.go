package agentd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
)

// serverClient returns the HTTP clients and base URL for a management
// server address: http:// (h2c) or https:// over TCP; unix:///path for the
// agent socket mounted into a container without a network; serial:///dev/…
// for a virtio-serial port of a VM (one byte stream the host side relays).
// The bulk client (files, egress tunnels) has a connection of its own where
// the address allows one: a download's bytes then never queue ahead of a
// keystroke in a socket buffer or a frame writer (measured: terminal echo
// during tunnel downloads, docs/benchmarks.md). A serial port, or a unix
// socket that relays one (a VM's), is one stream: everything shares it.
func serverClient(server, caFile string, unixTakesTwo bool) (control, bulk *http.Client, base string, err error) {
	control, base, err = serverClientOnce(server, caFile)
	if err != nil {
		return nil, nil, "", err
	}
	if strings.HasPrefix(server, "serial:") || (strings.HasPrefix(server, "unix:") && !unixTakesTwo) {
		return control, control, base, nil
	}
	bulk, _, err = serverClientOnce(server, caFile)
	return control, bulk, base, err
}

func serverClientOnce(server, caFile string) (*http.Client, string, error) {
	u, err := url.Parse(server)
	if err != nil {
		return nil, "", errors.New("management server must be an http://, https://, unix:// or serial:// URL")
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 15 * time.Second}
	switch {
	case (u.Scheme == "http" || u.Scheme == "https") && u.Host != "":
		c := httpClient(u.Scheme == "http", dialer.DialContext)
		if caFile != "" {
			pool, err := managementCA(caFile)
			if err != nil {
				return nil, "", err
			}
			c.Transport.(wholeEnvelopes).next.(*http.Transport).TLSClientConfig.RootCAs = pool
		}
		return c, server, nil
	case u.Scheme == "unix" && u.Path != "":
		return httpClient(true, func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", u.Path)
		}), "http://agent-socket", nil
	case u.Scheme == "serial" && u.Path != "":
		return httpClient(true, func(context.Context, string, string) (net.Conn, error) {
			return openSerial(u.Path)
		}), "http://agent-serial", nil
	}
	return nil, "", errors.New("management server must be an http://, https://, unix:// or serial:// URL")
}

// managementCA reads MANAGEMENT_CA: the roots the server's certificate is
// verified against (instead of the system's).
func managementCA(caFile string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("MANAGEMENT_CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("MANAGEMENT_CA %s: no certificate in it", caFile)
	}
	return pool, nil
}

// httpClient speaks HTTP/2, over cleartext (h2c) or TLS, and pings an idle
// connection so a dead server is noticed.
func httpClient(cleartext bool, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Client {
	tr := &http.Transport{
		DialContext:       dial,
		TLSClientConfig:   &tls.Config{MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
		// The server's windows (agentrpc.HTTP2Config): a stalled upload
		// holds at most its stream's 4 MiB of the connection's 64 MiB.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: 10 * time.Second,
			MaxReceiveBufferPerStream: 4 << 20, MaxReceiveBufferPerConnection: 64 << 20, MaxReadFrameSize: 1 << 20},
	}
	p := new(http.Protocols)
	if cleartext {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP2(true)
	}
	tr.Protocols = p
	return &http.Client{Transport: wholeEnvelopes{next: tr}}
}

// serialConn is a character device (a virtio-serial port) used as the one
// connection to the management server.
type serialConn struct {
	*os.File
}

func (serialConn) LocalAddr() net.Addr  { return serialAddr{} }
func (serialConn) RemoteAddr() net.Addr { return serialAddr{} }

type serialAddr struct{}

func (serialAddr) Network() string { return "serial" }
func (serialAddr) String() string  { return "serial" }

// openSerial opens the port non-blocking, so the runtime poller can wake a
// read when the connection is closed.
func openSerial(path string) (net.Conn, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	return serialConn{f}, nil
}
