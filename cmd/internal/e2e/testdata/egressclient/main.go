// egressclient fetches a URL through HTTPS_PROXY (as any program that
// honours it would), trusting the CA in the file given, and prints the
// status and body, or the error. The egress tests run it inside a
// network-less environment.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: egressclient URL CA.pem")
		os.Exit(2)
	}
	pem, err := os.ReadFile(os.Args[2])
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyFromEnvironment, TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	start := time.Now()
	resp, err := c.Get(os.Args[1])
	ttfb := time.Since(start)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	defer resp.Body.Close()
	head := make([]byte, 256)
	h, _ := io.ReadFull(resp.Body, head)
	n, err := io.Copy(io.Discard, resp.Body)
	fmt.Printf("STATUS %d BYTES %d READERR %v BODY %q TTFB_US %d ELAPSED_US %d\n", resp.StatusCode, int64(h)+n, err, head[:h],
		ttfb.Microseconds(), time.Since(start).Microseconds())
}
