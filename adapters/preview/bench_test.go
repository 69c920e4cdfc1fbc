package preview

import (
	"context"
	"io"
	"net/http"
	"testing"
)

// The preview's own cost, in process (the agent link's is measured by
// make bench): a 64 MiB download and a small request, through the preview
// and straight to the dev server.
func BenchmarkPreview(b *testing.B) {
	r := newRig(b, false)
	direct := "http://" + r.app.srv.Listener.Addr().String()
	through := "http://" + r.host(5173, "dev")
	viaPreview, plain := r.client(nil, false), &http.Client{Transport: &http.Transport{DisableCompression: true}}
	fetch := func(b *testing.B, c *http.Client, url string) int64 {
		req, _ := http.NewRequestWithContext(context.Background(), "GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil || resp.StatusCode != 200 {
			b.Fatal(resp.StatusCode, err)
		}
		return n
	}
	for _, bc := range []struct {
		name string
		c    *http.Client
		url  string
	}{
		{"download/direct", plain, direct + "/download"},
		{"download/preview", viaPreview, through + "/download"},
		{"small/direct", plain, direct + "/echo"},
		{"small/preview", viaPreview, through + "/echo"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				b.SetBytes(fetch(b, bc.c, bc.url))
			}
		})
	}
}
