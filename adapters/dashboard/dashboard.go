// Package dashboard serves the operator dashboard: one page and its two
// bundled assets (built from ui/ by `make generate`, embedded), behind a
// strict Content-Security-Policy. Everything it shows comes from the REST
// API and the client WebSocket, signed in with the session cookie.
package dashboard

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

//go:embed dist/app.js dist/app.css
var dist embed.FS

// asset is one embedded file, with its gzip form and a content hash.
type asset struct {
	body, gz    []byte
	contentType string
	etag        string
}

// Handler serves / and /assets/.
type Handler struct {
	// WSPort is the client WebSocket's port (the REST port − 1).
	wsPort string
	assets map[string]asset
	page   *template.Template
}

// New makes the handler; wsPort is the client WebSocket's port.
func New(wsPort int) (*Handler, error) {
	h := &Handler{wsPort: strconv.Itoa(wsPort), assets: map[string]asset{}}
	for name, ct := range map[string]string{"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"} {
		b, err := dist.ReadFile("dist/" + name)
		if err != nil {
			return nil, err
		}
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
		_, _ = zw.Write(b)
		_ = zw.Close()
		sum := sha256.Sum256(b)
		h.assets[name] = asset{body: b, gz: gz.Bytes(), contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	h.page = template.Must(template.New("page").Parse(page))
	return h, nil
}

const page = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="agentic-ws" content="{{.WS}}">
<title>agentic-sandbox</title>
<link rel="stylesheet" href="/assets/app.css?v={{.CSS}}">
</head>
<body>
<div id="app"></div>
<script type="module" src="/assets/app.js?v={{.JS}}"></script>
</body>
</html>
`

// wsOrigin is the client WebSocket as the page reaches it: the host the
// page was asked for, on the WebSocket's port.
func (h *Handler) wsOrigin(r *http.Request) (string, bool) {
	host := r.Host
	if hh, _, err := net.SplitHostPort(r.Host); err == nil {
		host = hh
	}
	// A Host that is not a plain name or address is not echoed anywhere.
	if host == "" || strings.ContainsAny(host, " \"'<>;,\\/") {
		return "", false
	}
	scheme := "ws"
	if r.TLS != nil {
		scheme = "wss"
	}
	return scheme + "://" + net.JoinHostPort(host, h.wsPort), true
}

func (h *Handler) headers(w http.ResponseWriter, ws string) {
	hd := w.Header()
	// xterm.js's DOM renderer injects <style> elements, so styles allow
	// 'unsafe-inline'; scripts come only from this server.
	hd.Set("Content-Security-Policy", fmt.Sprintf("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "+
		"img-src 'self' data:; font-src 'self'; connect-src 'self' %s; base-uri 'none'; form-action 'self'; frame-ancestors 'none'", ws))
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ws, ok := h.wsOrigin(r)
	if !ok {
		http.Error(w, "bad Host", http.StatusBadRequest)
		return
	}
	h.headers(w, ws)
	if name, isAsset := strings.CutPrefix(r.URL.Path, "/assets/"); isAsset {
		a, found := h.assets[name]
		if !found {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", a.contentType)
		w.Header().Set("ETag", a.etag)
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		w.Header().Set("Vary", "Accept-Encoding")
		if r.Header.Get("If-None-Match") == a.etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		body := a.body
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			body = a.gz
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	var buf bytes.Buffer
	_ = h.page.Execute(&buf, map[string]string{"WS": ws + "/ws", "JS": strings.Trim(h.assets["app.js"].etag, `"`), "CSS": strings.Trim(h.assets["app.css"].etag, `"`)})
	http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(buf.Bytes()))
}
