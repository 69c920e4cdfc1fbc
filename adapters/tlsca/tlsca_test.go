package tlsca

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"testing"
	"time"
)

func TestAuthorityServesAVerifiableCertificateAndRenewsIt(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	a, err := Open(dir, []string{"127.0.0.1", "mgmt.example"}, clock)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir + "/" + caKeyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key: %v %v", fi, err)
	}
	pem, err := os.ReadFile(a.CAPath())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("CA file is not a certificate")
	}
	handshake := func(name string) (*x509.Certificate, error) {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", a.TLSConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}
		}()
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(),
			&tls.Config{RootCAs: pool, ServerName: name, Time: clock})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0], nil
	}
	first, err := handshake("127.0.0.1")
	if err != nil {
		t.Fatalf("handshake with the CA: %v", err)
	}
	if _, err := handshake("other.example"); err == nil {
		t.Fatal("a name the certificate was not made for was accepted")
	}

	// A restart keeps both; near its expiry the server certificate is
	// renewed without a restart.
	b, err := Open(dir, []string{"127.0.0.1", "mgmt.example"}, clock)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := b.certificate(); c.Leaf.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatal("a restart replaced a valid certificate")
	}
	now = now.Add(serverValidity - renewBefore + time.Hour)
	renewed, err := handshake("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if renewed.SerialNumber.Cmp(first.SerialNumber) == 0 || !renewed.NotAfter.After(first.NotAfter) {
		t.Fatal("the certificate was not renewed before its expiry")
	}
}
