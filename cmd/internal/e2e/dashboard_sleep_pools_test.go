package e2e

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// A warm pool's idle policy from the dashboard, in a real Chromium against
// the real server with the Docker runtime (which can hibernate): the pool
// form takes idle_after and delete_after; a duration the server cannot
// read is refused with the API's own message, shown; a pool defined with
// them says them in its row and through the API; Edit fills the form with
// the pool as it is, and saving changes the policy. Screenshots go to the
// test's artifact directory (go test -artifacts -outputdir DIR).
func TestDashboardPoolIdlePolicy(t *testing.T) {
	host := privateDockerd(t)
	b := newBrowser(t)
	s := startServer(t, 0, t.TempDir(), "DOCKER_HOST="+host, "AGENTIC_RUNTIMES=docker")
	url := s.RESTURL + "/"
	pool := func(name string) restapi.Pool {
		t.Helper()
		ctx, cancel := ctxFor(patience)
		defer cancel()
		r, err := s.Client().ListPoolsWithResponse(ctx)
		if err != nil || r.JSON200 == nil {
			t.Fatalf("list pools: %v %v", err, r)
		}
		for _, p := range r.JSON200.Pools {
			if p.Name == name {
				return p
			}
		}
		t.Fatalf("no pool %s", name)
		return restapi.Pool{}
	}
	text := func(p *page, id string) string {
		return p.eval(`(document.querySelector('[data-testid="` + id + `"]') || {innerText: ""}).innerText.trim()`)
	}
	errorShown := func(field string) string {
		return `[...document.querySelectorAll("main .error")].some(e => e.innerText.includes("field ` + field + `") && e.innerText.includes("not a duration"))`
	}

	p := b.newPage()
	signInAs(p, url, s.Token, "")
	p.do("environments", chromedp.Click(testid("nav-environments")), chromedp.WaitVisible(testid("pool-name")))
	p.waitJS("docker chosen", `document.querySelector('[data-testid="pool-runtime"]').value === "docker"`)
	p.do("the pool's idle policy fields", chromedp.WaitVisible(testid("pool-idle-after")), chromedp.WaitVisible(testid("pool-delete-after")))

	// Sizes 0: the pool keeps no container, its definition is what is tested.
	setField(p, "pool-name", "dash-sleepy", "input")
	setField(p, "pool-size", "0", "input")
	setField(p, "pool-idle-after", "soon", "input")
	p.do("a pool with a bad idle_after", chromedp.Click(testid("pool-put")))
	p.waitJS("the refusal of idle_after", errorShown("idle_after"))
	p.shot("pool-sleep-00-bad-idle-after")
	setField(p, "pool-idle-after", "45m", "input")
	setField(p, "pool-delete-after", "a day", "input")
	p.do("a pool with a bad delete_after", chromedp.Click(testid("pool-put")))
	p.waitJS("the refusal of delete_after", errorShown("delete_after"))
	// The API says the same, word for word.
	st, _, body := restDo(t, s, "PUT", "/api/v1/pools/dash-sleepy", "application/json", `{"runtime":"docker","size":0,"idle_after":"45m","delete_after":"a day"}`, func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+s.Token)
	})
	var refusal struct{ Error, Code string }
	if err := json.Unmarshal(body, &refusal); err != nil || st != 400 || refusal.Code != "invalid_request" {
		t.Fatalf("the API's refusal: %d %s", st, body)
	}
	if shown := p.eval(`[...document.querySelectorAll("main .error")].map(e => e.innerText.trim()).join(" | ")`); shown != refusal.Error {
		t.Fatalf("the dashboard shows %q, the API says %q", shown, refusal.Error)
	}
	if listed := p.eval(`String(!!document.querySelector('[data-testid="pool-row-dash-sleepy"]'))`); listed != "false" {
		t.Fatal("a refused pool is listed")
	}

	setField(p, "pool-delete-after", "24h", "input")
	p.do("define it", chromedp.Click(testid("pool-put")), chromedp.WaitVisible(testid("pool-row-dash-sleepy")))
	got := pool("dash-sleepy")
	if got.IdleAfter == nil || *got.IdleAfter != "45m0s" || got.DeleteAfter == nil || *got.DeleteAfter != "24h0m0s" || got.Size != 0 {
		t.Fatalf("the pool as defined from the form: idle_after %v delete_after %v size %d", got.IdleAfter, got.DeleteAfter, got.Size)
	}
	p.waitJS("its policy in its row", `!!document.querySelector('[data-testid="pool-idle-after-dash-sleepy"]')`)
	if got := text(p, "pool-idle-after-dash-sleepy"); got != "sleep after 45m idle" {
		t.Errorf("its idle_after shown as %q", got)
	}
	if got := text(p, "pool-delete-after-dash-sleepy"); got != "deleted 24h after they sleep or stop" {
		t.Errorf("its delete_after shown as %q", got)
	}
	p.shot("pool-sleep-01-defined")

	// Edit: the form holds the pool as it is; a shorter idle_after saved,
	// delete_after cleared.
	p.do("edit it", chromedp.Click(testid("pool-edit-dash-sleepy")))
	p.waitJS("the form filled", `document.querySelector('[data-testid="pool-name"]').value === "dash-sleepy" && document.querySelector('[data-testid="pool-idle-after"]').value === "45m" && document.querySelector('[data-testid="pool-delete-after"]').value === "24h" && document.querySelector('[data-testid="pool-put"]').innerText.trim() === "Save"`)
	setField(p, "pool-idle-after", "10m", "input")
	setField(p, "pool-delete-after", "", "input")
	p.do("save it", chromedp.Click(testid("pool-put")))
	p.waitJS("its new policy in its row", `(document.querySelector('[data-testid="pool-idle-after-dash-sleepy"]') || {innerText: ""}).innerText.trim() === "sleep after 10m idle" && !document.querySelector('[data-testid="pool-delete-after-dash-sleepy"]')`)
	got = pool("dash-sleepy")
	if got.IdleAfter == nil || *got.IdleAfter != "10m0s" || got.DeleteAfter != nil {
		t.Fatalf("the pool as edited: idle_after %v delete_after %v", got.IdleAfter, got.DeleteAfter)
	}
	p.shot("pool-sleep-02-edited")
}
