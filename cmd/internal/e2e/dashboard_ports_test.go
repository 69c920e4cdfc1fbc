package e2e

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// portJSON is one item of a ports list as the REST API sends it, read as
// JSON (public, public_until and preview_url are previews' fields).
type portJSON struct {
	Port        int        `json:"port"`
	Address     string     `json:"address"`
	Family      string     `json:"family"`
	Process     string     `json:"process"`
	Public      bool       `json:"public"`
	PublicUntil *time.Time `json:"public_until"`
	PreviewURL  string     `json:"preview_url"`
}

// restPorts is GET path (a ports list) with the operator token: the items on
// port.
func restPorts(t *testing.T, s *harness.Server, path string, port int) []portJSON {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.RESTURL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var l struct {
		Ports []portJSON `json:"ports"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d", path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	var out []portJSON
	for _, p := range l.Ports {
		if p.Port == port {
			out = append(out, p)
		}
	}
	return out
}

// freeTCPPort is a port nothing on this machine listens on now (host agents
// share its network).
func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// The dashboard's ports: an environment on the host runtime, reached from
// the Environments list, shows a listener started in a background session
// of it (from the change stream: the page's safety-net reload is ten
// minutes away), with "Open" (its preview URL, in a new tab), and "Make
// public" / "Make private" flip its mark, as REST then says too; when the
// listener stops its row goes. A plain agent's page lists the same port
// (host agents share the machine's network) without the toggles or a
// preview link. Screenshots go to the test's artifact directory.
func TestDashboardPorts(t *testing.T) {
	b := newBrowser(t)
	s := startServer(t, 1, "")
	const env = "dash-ports"
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if r, err := s.Client().CreateEnvironmentWithResponse(ctx, restapi.CreateEnvironmentRequest{Runtime: "host", Name: env}); err != nil || r.StatusCode() >= 300 {
		t.Fatalf("create environment: %v %v", err, r)
	}
	testkit.Eventually(t, patience, env+" ready", func() bool {
		r, err := s.Client().GetEnvironmentWithResponse(ctx, env)
		return err == nil && r.JSON200 != nil && r.JSON200.State == restapi.EnvReady
	})
	port := freeTCPPort(t)
	n := strconv.Itoa(port)
	row := `document.querySelector('[data-testid="port-row-` + n + `"]')`
	vis := `document.querySelector('[data-testid="port-visibility-` + n + `"]')`
	dash := s.RESTURL + "/"

	p := b.newPage()
	signInAs(p, dash, s.Token, "")
	p.do("environments", chromedp.Navigate(dash+"#/environments"), chromedp.WaitVisible(testid("env-link-"+env)))
	p.waitJS("its row ready", `document.querySelector('[data-testid="env-row-`+env+`"]').innerText.includes("ready")`)
	p.shot("00-environments")
	p.do("the environment's page", chromedp.Click(testid("env-link-"+env)), chromedp.WaitVisible(testid("ports")))
	p.waitJS("its state", `document.querySelector('[data-testid="env-state"]').innerText === "ready"`)
	p.waitJS("its ports listed", `!!document.querySelector('[data-testid^="port-row-"]') || !!document.querySelector('[data-testid="ports-empty"]')`)
	if p.eval(`String(!!`+row+`)`) == "true" {
		t.Fatalf("port %d listed before anything listens on it", port)
	}

	// A server starts inside: the page shows it, named by its process.
	bg := restapi.SessionType("background")
	sess := createSession(t, s, env, restapi.CreateSessionRequest{Type: &bg, Command: "busybox", Args: &[]string{"nc", "-l", "-p", n}})
	// Its tmux outlives the server: a failed test must not leave it listening.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		_, _ = s.Client().KillSessionWithResponse(ctx, sess.SessionId)
	})
	p.waitJS("the listener on the page", `!!`+row+` && `+row+`.innerText.includes("busybox")`)
	p.waitJS("private at first", vis+`.innerText.trim() === "private" && !!document.querySelector('[data-testid="port-public-`+n+`"]')`)
	p.shot("01-port-listed")
	listed := restPorts(t, s, "/api/v1/environments/"+env+"/ports", port)
	if len(listed) == 0 {
		t.Fatalf("port %d on the page but not in REST's list", port)
	}
	for _, it := range listed {
		if it.Public || it.PublicUntil != nil {
			t.Fatalf("a new port is public: %+v", it)
		}
	}
	// "Open" is the preview URL, in a new tab that cannot reach this one.
	if listed[0].PreviewURL == "" {
		t.Fatalf("no preview_url in REST's list: %+v", listed)
	}
	open := `document.querySelector('[data-testid="port-open-` + n + `"]')`
	p.waitJS("the Open link", `!!`+open)
	if href, target, rel := p.eval(open+`.getAttribute("href")`), p.eval(open+`.getAttribute("target")`), p.eval(open+`.getAttribute("rel")`); href != listed[0].PreviewURL || target != "_blank" || !strings.Contains(rel, "noopener") {
		t.Fatalf("Open: href %q target %q rel %q; preview_url %q", href, target, rel, listed[0].PreviewURL)
	}

	// Make public: an hour's mark, on the page and in REST.
	p.do("make it public", chromedp.Click(testid("port-public-"+n)))
	p.waitJS("public until", vis+`.innerText.includes("public") && `+vis+`.innerText.includes("until") && !!document.querySelector('[data-testid="port-private-`+n+`"]')`)
	p.shot("02-port-public")
	for _, it := range restPorts(t, s, "/api/v1/environments/"+env+"/ports", port) {
		if !it.Public || it.PublicUntil == nil || it.PublicUntil.Before(time.Now().Add(30*time.Minute)) || it.PublicUntil.After(time.Now().Add(61*time.Minute)) {
			t.Fatalf("after Make public, REST lists %+v (want public for an hour)", it)
		}
	}
	// The environment's agent's list says the same; a plain agent's page
	// lists the port without toggles or a preview link.
	for _, it := range restPorts(t, s, "/api/v1/agents/"+env+"/ports", port) {
		if !it.Public {
			t.Fatalf("the environment's agent lists %+v", it)
		}
	}
	a := b.newPage()
	signInAs(a, dash, s.Token, "")
	a.do("agents", chromedp.Navigate(dash+"#/agents"), chromedp.WaitVisible(testid("agent-link-host-01")))
	a.do("host-01's page", chromedp.Click(testid("agent-link-host-01")), chromedp.WaitVisible(testid("ports")))
	a.waitJS("the listener on host-01's page", `!!`+row+` && `+row+`.innerText.includes("busybox")`)
	if got := a.eval(`String(!!document.querySelector('[data-testid="port-public-` + n + `"], [data-testid="port-private-` + n + `"], [data-testid="port-open-` + n + `"]'))`); got != "false" {
		t.Fatal("a plain agent's page offers Make public/private or Open")
	}
	a.shot("03-agent-ports")

	// Make private: back to private on the page and in REST.
	p.do("make it private", chromedp.Click(testid("port-private-"+n)))
	p.waitJS("private again", vis+`.innerText.trim() === "private" && !!document.querySelector('[data-testid="port-public-`+n+`"]')`)
	p.shot("04-port-private")
	for _, it := range restPorts(t, s, "/api/v1/environments/"+env+"/ports", port) {
		if it.Public || it.PublicUntil != nil {
			t.Fatalf("after Make private, REST lists %+v", it)
		}
	}

	// The server stops: its row goes.
	if r, err := s.Client().KillSessionWithResponse(ctx, sess.SessionId); err != nil || r.StatusCode() >= 300 {
		t.Fatalf("kill: %v %v", err, r)
	}
	p.waitJS("the stopped listener gone from the page", `!`+row)
	p.shot("05-port-gone")
}

// sameCookiesTab opens another tab in p's browser context: its cookies.
func sameCookiesTab(b *browser, p *page) *page {
	b.t.Helper()
	ctx, cancel := chromedp.NewContext(p.ctx)
	b.t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		b.t.Fatalf("a new tab: %v", err)
	}
	return &page{t: b.t, ctx: ctx, shots: p.shots}
}

// documents records the URLs of the documents a page asks for (redirects
// included).
type documents struct {
	mu   sync.Mutex
	urls []string
}

func recordDocuments(p *page) *documents {
	d := &documents{}
	if err := chromedp.Listen(p.ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok && e.Type == network.ResourceTypeDocument && e.Request != nil {
			d.mu.Lock()
			d.urls = append(d.urls, e.Request.URL)
			d.mu.Unlock()
		}
	}); err != nil {
		p.t.Fatal(err)
	}
	return d
}

func (d *documents) count(u string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, x := range d.urls {
		if x == u {
			n++
		}
	}
	return n
}

func (d *documents) all() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.urls...)
}

// The dashboard opened as /?next=<the preview sign-in> (where a preview host
// sends a browser that is not signed in) goes on there once signed in, or
// at once when it already is; any other return address is refused and
// dropped, signed in or not: the dashboard redirects nowhere else.
func TestDashboardPortsSignInReturnsToThePreviewSignInOnly(t *testing.T) {
	b := newBrowser(t)
	s := startServer(t, 0, "")
	base := s.RESTURL + "/"
	rest, err := url.Parse(s.RESTURL)
	if err != nil {
		t.Fatal(err)
	}
	next := "/preview-signin?host=5173-dash.localhost%3A" + rest.Port() + "&next=%2Fapp%3Fa%3D1"
	withNext := func(n string) string { return base + "?next=" + url.QueryEscape(n) }

	// Signed out: the sign-in says where it goes on to, and does.
	p := b.newPage()
	docs := recordDocuments(p)
	p.do("open the dashboard with a return address", chromedp.Navigate(withNext(next)), chromedp.WaitVisible(testid("signin-for-preview")))
	p.shot("10-signin-for-preview")
	p.do("sign in", chromedp.SendKeys(testid("signin-token"), s.Token), chromedp.Click(testid("signin-submit")))
	testkit.Eventually(t, patience, "the browser sent on to "+next, func() bool { return docs.count(s.RESTURL+next) > 0 })
	// Signed in already: on at once. (Another tab with the same cookies:
	// the first may still be on its way through the preview host.)
	p2 := sameCookiesTab(b, p)
	docs2 := recordDocuments(p2)
	p2.do("the dashboard with a return address, signed in", chromedp.Navigate(withNext(next)))
	testkit.Eventually(t, patience, "the signed-in browser sent on to "+next, func() bool { return docs2.count(s.RESTURL+next) > 0 })
	if docs2.count(withNext(next)) != 1 {
		t.Fatalf("the signed-in tab's documents: %q", docs2.all())
	}

	// Elsewhere is refused: dropped from the address, signed out and in.
	refused := []string{
		"https://evil.example/preview-signin?host=x",
		"//evil.example/preview-signin?host=x",
		"/\\evil.example/preview-signin?host=x",
		"javascript:alert(1)//preview-signin?",
		"/preview-signin",
		"/preview-signinx?host=x",
		"/api/v1/agents?x",
		"/?next=/preview-signin?host=x",
	}
	q := b.newPage()
	qdocs := recordDocuments(q)
	for i, n := range refused {
		q.do("open the dashboard with "+n, chromedp.Navigate(withNext(n)))
		if i == 0 {
			q.waitJS("the sign-in", `!!document.querySelector('[data-testid="signin-token"]')`)
			q.waitJS(n+" dropped from the address", `location.search === ""`)
			if q.eval(`String(!!document.querySelector('[data-testid="signin-for-preview"]'))`) != "false" {
				t.Fatalf("the sign-in offers to go on to %q", n)
			}
			q.shot("11-signin-refused-return")
			q.do("sign in", chromedp.SendKeys(testid("signin-token"), s.Token), chromedp.Click(testid("signin-submit")), chromedp.WaitVisible(testid("nav-agents")))
			continue
		}
		q.waitJS(n+" dropped from the address, the dashboard shown", `location.search === "" && !!document.querySelector('[data-testid="nav-agents"]')`)
	}
	q.shot("12-dashboard-after-refused-return")
	for _, u := range qdocs.all() {
		if u != base && !strings.HasPrefix(u, base+"?next=") {
			t.Fatalf("a refused return address was followed: %s (all: %q)", u, qdocs.all())
		}
	}
	if got := q.eval(`location.origin + location.pathname`); got != base {
		t.Fatalf("the page is at %s", got)
	}
}
