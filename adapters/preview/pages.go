package preview

import (
	"encoding/json"
	"html/template"
	"net/http"
	"strings"
)

// problem is an answer of the preview itself: a small page for a browser,
// JSON {"error","code"} for everyone else.
type problem struct {
	status int
	code   string
	title  string
	msg    string
	hint   string
}

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>{{.Title}} · agentic-sandbox preview</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40em;margin:4em auto;padding:0 1em;color:#222}h1{font-size:1.4em}.code{color:#777;font:13px monospace}</style>
</head><body>
<h1>{{.Title}}</h1>
<p>{{.Msg}}</p>
{{if .Hint}}<p>{{.Hint}}</p>{{end}}
<p class="code">{{.Status}} {{.Code}} · agentic-sandbox preview</p>
</body></html>
`))

// wantsHTML is a browser asking for a page (not an upgrade, not XHR).
func wantsHTML(r *http.Request) bool {
	return r.Header.Get("Upgrade") == "" && strings.Contains(r.Header.Get("Accept"), "text/html")
}

func (h *Handler) writeProblem(w http.ResponseWriter, r *http.Request, p problem) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Cache-Control", "no-store")
	if wantsHTML(r) {
		hd.Set("Content-Type", "text/html; charset=utf-8")
		if hd.Get("Content-Security-Policy") == "" {
			hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		}
		w.WriteHeader(p.status)
		if r.Method != http.MethodHead {
			_ = pageTmpl.Execute(w, struct {
				Title, Msg, Hint, Code string
				Status                 int
			}{p.title, p.msg, p.hint, p.code, p.status})
		}
		return
	}
	msg := p.msg
	if p.hint != "" {
		msg += " " + p.hint
	}
	writeJSON(w, p.status, p.code, msg)
}

// writeJSON answers {"error","code"}, like the REST API.
func writeJSON(w http.ResponseWriter, status int, code, msg string) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": code})
}
