// Package tlsca makes and keeps the agent port's TLS identity: a private CA
// and a server certificate signed by it, in <data dir>/tls/. Agents trust
// the CA (MANAGEMENT_CA), never the system roots for it, and the server
// certificate is renewed before it expires, without a restart.
package tlsca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/fsatomic"
)

const (
	caValidity     = 10 * 365 * 24 * time.Hour
	serverValidity = 90 * 24 * time.Hour
	// renewBefore is how long before its expiry the server certificate is
	// replaced.
	renewBefore = 30 * 24 * time.Hour
)

// Files in the tls dir.
const (
	CAFile        = "ca.pem"
	caKeyFile     = "ca-key.pem"
	serverFile    = "server.pem"
	serverKeyFile = "server-key.pem"
)

// Authority is the CA and the current server certificate.
type Authority struct {
	dir   string
	hosts []string
	now   func() time.Time

	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey

	mu     sync.Mutex
	server *tls.Certificate
}

// Open loads the CA and server certificate in dir, making what is missing;
// hosts are the names and addresses agents reach the server by.
func Open(dir string, hosts []string, now func() time.Time) (*Authority, error) {
	if now == nil {
		now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tlsca: %w", err)
	}
	a := &Authority{dir: dir, hosts: hosts, now: now}
	if err := a.loadOrMakeCA(); err != nil {
		return nil, err
	}
	if _, err := a.certificate(); err != nil {
		return nil, err
	}
	return a, nil
}

// CAPath is the CA certificate agents are given (MANAGEMENT_CA).
func (a *Authority) CAPath() string { return filepath.Join(a.dir, CAFile) }

// TLSConfig serves the current server certificate, renewed when due.
func (a *Authority) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return a.certificate()
		},
	}
}

func (a *Authority) loadOrMakeCA() error {
	cert, key, err := loadPair(filepath.Join(a.dir, CAFile), filepath.Join(a.dir, caKeyFile))
	if err == nil {
		a.ca, a.caKey = cert, key
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "agentic-sandbox agent CA"},
		NotBefore:             a.now().Add(-time.Hour),
		NotAfter:              a.now().Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	if err := writePair(filepath.Join(a.dir, CAFile), filepath.Join(a.dir, caKeyFile), der, key); err != nil {
		return err
	}
	a.ca, _ = x509.ParseCertificate(der)
	a.caKey = key
	return nil
}

// certificate returns the server certificate, making a new one when there
// is none or the current one is due for renewal.
func (a *Authority) certificate() (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.server == nil {
		if cert, key, err := loadPair(filepath.Join(a.dir, serverFile), filepath.Join(a.dir, serverKeyFile)); err == nil && a.covers(cert) {
			a.server = &tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
		}
	}
	if a.server != nil && a.now().Before(a.server.Leaf.NotAfter.Add(-renewBefore)) {
		return a.server, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "agentic-mgmt"},
		NotBefore:    a.now().Add(-time.Hour),
		NotAfter:     a.now().Add(serverValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range a.hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.ca, &key.PublicKey, a.caKey)
	if err != nil {
		return nil, err
	}
	if err := writePair(filepath.Join(a.dir, serverFile), filepath.Join(a.dir, serverKeyFile), der, key); err != nil {
		return nil, err
	}
	leaf, _ := x509.ParseCertificate(der)
	a.server = &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	return a.server, nil
}

// covers reports whether cert was signed by this CA for every host.
func (a *Authority) covers(cert *x509.Certificate) bool {
	if cert.CheckSignatureFrom(a.ca) != nil {
		return false
	}
	for _, h := range a.hosts {
		if h != "" && cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return n
}

func writePair(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := fsatomic.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		return fmt.Errorf("tlsca: %w", err)
	}
	if err := fsatomic.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("tlsca: %w", err)
	}
	return nil
}

func loadPair(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cblock, _ := pem.Decode(cb)
	kblock, _ := pem.Decode(kb)
	if cblock == nil || kblock == nil {
		return nil, nil, fmt.Errorf("tlsca: %s or %s is not PEM", certPath, keyPath)
	}
	cert, err := x509.ParseCertificate(cblock.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsca: %s: %w", certPath, err)
	}
	key, err := x509.ParseECPrivateKey(kblock.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsca: %s: %w", keyPath, err)
	}
	return cert, key, nil
}
