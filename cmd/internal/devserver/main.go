// Command devserver is the dev server of the preview and port-forward
// tests and benchmarks (issue 29): a small static program, like `npm run
// dev`, that a test starts inside an environment (a network-less container,
// a VM without a NIC, a host agent) and reaches through a preview URL or
// `agenticctl port-forward`. Built with CGO_ENABLED=0 it runs in the
// busybox image and in the tiny VM.
//
// Routes:
//   - / an HTML page whose script opens a WebSocket to /ws on its own
//     origin, sends "hello" and shows the echo, and follows /events with an
//     EventSource, showing each event (a screenshot shows both worked);
//   - /download?bytes=N streams N bytes of Pattern (default 1 MiB);
//   - /events?count=N Server-Sent Events, N (default 5) one every 100 ms,
//     each flushed; with gate=G each event after the first is sent only once
//     the client has read the one before and said so with /events/ack?gate=G
//     (so a test proves the events arrive one by one without timing them);
//   - /ws a WebSocket echo of every message;
//   - /echo-headers the request's method, URI, Host and headers as JSON;
//   - /echo-body the request's body back as it comes.
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"html"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:5173", "address to listen on")
	flag.Parse()
	srv := &http.Server{Addr: *addr, Handler: newHandler(), ReadHeaderTimeout: time.Minute}
	log.Printf("devserver listening on %s", *addr)
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "devserver:", err)
		os.Exit(1)
	}
}

// PatternWord is the download pattern: the 8-byte word at the aligned
// stream offset off is PatternWord(off), big-endian. Each word differs from
// every other (an odd multiplier is a bijection), so a byte lost, repeated
// or moved anywhere in the stream shows, and the bytes look random enough
// that nothing on the way compresses them. The e2e tests and the benchmark
// check downloads against the same definition.
func PatternWord(off uint64) uint64 { return off * 0x9E3779B97F4A7C15 }

// Fill writes the pattern for the stream offset off into b.
func Fill(b []byte, off uint64) {
	for i := range b {
		pos := off + uint64(i)
		word := pos &^ 7
		var w [8]byte
		binary.BigEndian.PutUint64(w[:], PatternWord(word))
		b[i] = w[pos-word]
	}
}

// fillAligned is Fill for an 8-aligned off and len(b) a multiple of 8.
func fillAligned(b []byte, off uint64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.BigEndian.PutUint64(b[i:], PatternWord(off+uint64(i)))
	}
}

type handler struct {
	mux   *http.ServeMux
	up    websocket.Upgrader
	mu    sync.Mutex
	gates map[string]chan struct{}
}

func newHandler() http.Handler {
	h := &handler{
		mux: http.NewServeMux(),
		// A dev server takes any origin (Vite does, on loopback); the
		// preview in front of it is what decides who gets here.
		up:    websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }},
		gates: map[string]chan struct{}{},
	}
	h.mux.HandleFunc("GET /{$}", h.page)
	h.mux.HandleFunc("GET /download", h.download)
	h.mux.HandleFunc("GET /events", h.events)
	h.mux.HandleFunc("GET /events/ack", h.ack)
	h.mux.HandleFunc("GET /ws", h.ws)
	h.mux.HandleFunc("/echo-headers", h.echoHeaders)
	h.mux.HandleFunc("/echo-body", h.echoBody)
	return h.mux
}

const pageHTML = `<!doctype html>
<html>
<head>
<meta charset="utf-8">
<title>devserver: preview test page</title>
<style>
body { font-family: sans-serif; margin: 2em; }
.ok { color: #080; } .wait { color: #a60; }
li { font-family: monospace; }
</style>
</head>
<body>
<h1>devserver</h1>
<p>Served to Host <code id="host">%s</code>; this page is at <code id="location"></code>.</p>
<h2>WebSocket</h2>
<p id="ws" class="wait">connecting…</p>
<h2>Server-Sent Events</h2>
<p id="sse-state" class="wait">connecting…</p>
<ol id="sse"></ol>
<script>
document.getElementById("location").textContent = location.href;
const wsEl = document.getElementById("ws");
const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
ws.onopen = () => { wsEl.textContent = "open, sent hello"; ws.send("hello"); };
ws.onmessage = (m) => { wsEl.textContent = "echo: " + m.data; wsEl.className = "ok"; wsEl.dataset.echo = m.data; };
ws.onerror = () => { wsEl.textContent = "WebSocket error"; };
const want = 5;
const list = document.getElementById("sse"), state = document.getElementById("sse-state");
const es = new EventSource("/events?count=" + want);
es.onopen = () => { state.textContent = "open"; };
es.onmessage = (e) => {
  const li = document.createElement("li");
  li.textContent = e.data;
  list.appendChild(li);
  state.textContent = list.children.length + " of " + want + " events";
  if (list.children.length >= want) { es.close(); state.className = "ok"; state.dataset.done = "true"; }
};
es.onerror = () => { if (!state.dataset.done) state.textContent = "EventSource error"; };
</script>
</body>
</html>
`

func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprintf(w, pageHTML, html.EscapeString(r.Host))
}

func (h *handler) download(w http.ResponseWriter, r *http.Request) {
	n := uint64(1 << 20)
	if s := r.URL.Query().Get("bytes"); s != "" {
		v, err := strconv.ParseUint(s, 10, 63)
		if err != nil {
			http.Error(w, "bytes: a count of bytes", http.StatusBadRequest)
			return
		}
		n = v
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatUint(n, 10))
	buf := make([]byte, 256<<10)
	for off := uint64(0); off < n; {
		chunk := buf
		if rest := n - off; rest < uint64(len(chunk)) {
			chunk = chunk[:rest]
		}
		if off%8 == 0 && len(chunk)%8 == 0 {
			fillAligned(chunk, off)
		} else {
			Fill(chunk, off)
		}
		if _, err := w.Write(chunk); err != nil {
			return
		}
		off += uint64(len(chunk))
	}
}

// gate is the channel acks of gate id arrive on.
func (h *handler) gate(id string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, ok := h.gates[id]
	if !ok {
		g = make(chan struct{}, 1024)
		h.gates[id] = g
	}
	return g
}

func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	count := 5
	if s := r.URL.Query().Get("count"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 || v > 100000 {
			http.Error(w, "count: 0..100000", http.StatusBadRequest)
			return
		}
		count = v
	}
	var gate chan struct{}
	if id := r.URL.Query().Get("gate"); id != "" {
		gate = h.gate(id)
	}
	f, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "no flushing", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	f.Flush()
	for i := 1; i <= count; i++ {
		if i > 1 {
			if gate != nil {
				// The client read event i-1 and said so.
				select {
				case <-gate:
				case <-r.Context().Done():
					return
				case <-time.After(5 * time.Minute):
					return
				}
			} else {
				select {
				case <-time.After(100 * time.Millisecond):
				case <-r.Context().Done():
					return
				}
			}
		}
		if _, err := fmt.Fprintf(w, "id: %d\ndata: event %d of %d\n\n", i, i, count); err != nil {
			return
		}
		f.Flush()
	}
}

func (h *handler) ack(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("gate")
	if id == "" {
		http.Error(w, "gate: which stream", http.StatusBadRequest)
		return
	}
	select {
	case h.gate(id) <- struct{}{}:
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "too many acks", http.StatusTooManyRequests)
	}
}

func (h *handler) ws(w http.ResponseWriter, r *http.Request) {
	c, err := h.up.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	defer c.Close()
	for {
		kind, msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		if err := c.WriteMessage(kind, msg); err != nil {
			return
		}
	}
}

func (h *handler) echoHeaders(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"method":  r.Method,
		"uri":     r.RequestURI,
		"host":    r.Host,
		"headers": r.Header,
	})
}

func (h *handler) echoBody(w http.ResponseWriter, r *http.Request) {
	// Both ways at once: the answer starts before the request has ended.
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			return
		}
	}
}
