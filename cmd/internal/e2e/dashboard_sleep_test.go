package e2e

import (
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// Sleep and wake in the dashboard, in a real Chromium against the real
// server with the Docker runtime on a private dockerd (whose hibernate is
// `filesystem` here) and AGENTIC_HIBERNATE_MAX_BYTES of 12 MiB (one
// hibernated environment at a time: each has 8 MiB written, which a save
// of its files reserves before it is made): the create form takes an idle policy (a bad one
// is the server's refusal, shown); Hibernate shows the environment asleep
// with its saved size, why and since when, and its last activity; a second
// Hibernate is refused as hibernate_limit, said so; Wake shows its progress
// and then the environment ready; a wake whose saved state is gone shows
// wake_failed and the environment failed with the reason. A viewer's page
// shows every change live (no reload) and never a Hibernate or Wake button.
// Screenshots go to the test's artifact directory (go test -artifacts
// -outputdir DIR).
func TestDashboardSleepAndWake(t *testing.T) {
	host := privateDockerd(t)
	b := newBrowser(t)
	dataDir := t.TempDir()
	s := startServer(t, 0, dataDir, "DOCKER_HOST="+host, "AGENTIC_RUNTIMES=docker", "AGENTIC_HIBERNATE_MAX_BYTES="+strconv.Itoa(12<<20))
	url := s.RESTURL + "/"
	const fill = "dd if=/dev/zero of=/tmp/fill bs=1048576 count=8 2>/dev/null" // of the 12 MiB limit
	viewer := rolesToken(t, s, "e2e-sleep-viewer", "viewer")
	get := func(name string) restapi.Environment { t.Helper(); return getEnv(t, s, name) }
	row := func(name string) string {
		return `(document.querySelector('[data-testid="env-row-` + name + `"]') || {innerText: ""}).innerText`
	}
	text := func(p *page, id string) string {
		return p.eval(`(document.querySelector('[data-testid="` + id + `"]') || {innerText: ""}).innerText.trim()`)
	}
	state := func(name string) string {
		return `(document.querySelector('[data-testid="env-state-` + name + `"]') || {innerText: ""}).innerText.trim()`
	}

	p := b.newPage()
	signInAs(p, url, s.Token, "")
	p.do("environments", chromedp.Click(testid("nav-environments")), chromedp.WaitVisible(testid("env-name")))
	p.waitJS("docker chosen", `document.querySelector('[data-testid="env-runtime"]').value === "docker"`)
	p.do("the idle policy fields", chromedp.WaitVisible(testid("env-idle-after")), chromedp.WaitVisible(testid("env-delete-after")))

	// A duration the server cannot read is refused, and the page says why.
	setField(p, "env-name", "dash-sleep", "input")
	setField(p, "env-idle-after", "soon", "input")
	p.do("a create with a bad idle_after", chromedp.Click(testid("env-create")))
	p.waitJS("the refusal", `[...document.querySelectorAll("main .error")].some(e => e.innerText.includes("idle_after") && e.innerText.includes("not a duration"))`)
	p.shot("sleep-00-bad-idle-after")

	// Created from the form with its idle policy; its row says the policy.
	setField(p, "env-idle-after", "2h", "input")
	setField(p, "env-delete-after", "24h", "input")
	p.do("create it", chromedp.Click(testid("env-create")), chromedp.WaitVisible(testid("env-row-dash-sleep")))
	p.waitJS("dash-sleep ready", state("dash-sleep")+` === "ready"`)
	created := get("dash-sleep")
	if created.IdleAfter == nil || *created.IdleAfter != "2h0m0s" || created.DeleteAfter == nil || *created.DeleteAfter != "24h0m0s" ||
		created.Hibernate == nil || (*created.Hibernate != restapi.HibernateFilesystem && *created.Hibernate != restapi.HibernateMemory) {
		t.Fatalf("dash-sleep as created from the form: idle_after %v delete_after %v hibernate %v", created.IdleAfter, created.DeleteAfter, created.Hibernate)
	}
	mode := string(*created.Hibernate) // filesystem here; memory where the engine checkpoints
	if got := text(p, "env-idle-after-dash-sleep"); got != "sleeps after 2h idle" {
		t.Errorf("its idle policy shown as %q", got)
	}
	if got := text(p, "env-delete-after-dash-sleep"); got != "deleted 24h after it sleeps or stops" {
		t.Errorf("its delete policy shown as %q", got)
	}
	st, _, body := restDo(t, s, "POST", "/api/v1/environments", "application/json", `{"runtime":"docker","name":"dash-full"}`, func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+s.Token)
	})
	if st != 202 {
		t.Fatalf("creating dash-full: %d %s", st, body)
	}
	p.waitJS("dash-full ready", state("dash-full")+` === "ready"`)
	execOut(t, s, "dash-full", fill)

	// The viewer watches the same list: no write control, and every change
	// below reaches it without a reload.
	v := b.newPage()
	signInAs(v, url, viewer, "")
	v.do("environments", chromedp.Click(testid("nav-environments")), chromedp.WaitVisible(testid("env-row-dash-sleep")))
	v.waitJS("both ready", state("dash-sleep")+` === "ready" && `+state("dash-full")+` === "ready"`)
	v.eval(`window.__notReloaded = "yes"`)
	noSleepButtons := func(what string) {
		t.Helper()
		got := v.eval(`[...document.querySelectorAll("main button")].map(b => b.innerText.trim()).filter(t => /^(Hibernate|Wake|Create|Delete|Start|Stop)$/.test(t)).join(",")`)
		if got != "" {
			v.shot("failed-viewer-" + what)
			t.Errorf("the viewer sees %s when %s", got, what)
		}
		if v.eval(`String(window.__notReloaded)`) != "yes" {
			t.Fatalf("the viewer's page was reloaded (%s)", what)
		}
	}
	noSleepButtons("both are ready")

	// Some work in dash-sleep: its last activity.
	execOut(t, s, "dash-sleep", "echo kept > /tmp/kept && "+fill)

	// Hibernate: asleep, with its saved size, since when and why.
	p.do("hibernate dash-sleep", chromedp.Click(testid("env-hibernate-dash-sleep")))
	p.waitJS("dash-sleep hibernated", state("dash-sleep")+` === "hibernated" && !!document.querySelector('[data-testid="env-asleep-dash-sleep"]')`)
	p.waitJS("the hibernate's outcome", `!!document.querySelector('[data-testid="env-sleep-done-dash-sleep"]')`)
	e := get("dash-sleep")
	if e.SavedBytes == nil || *e.SavedBytes <= 0 || e.SleepReason == nil || *e.SleepReason != "requested" {
		t.Fatalf("dash-sleep hibernated: saved_bytes %v sleep_reason %v", e.SavedBytes, e.SleepReason)
	}
	checkSize(t, "the saved size shown", text(p, "env-saved-dash-sleep"), *e.SavedBytes)
	checkSize(t, "the hibernate's outcome", strings.TrimSuffix(strings.SplitN(text(p, "env-sleep-done-dash-sleep"), ": ", 2)[1], " saved."), *e.SavedBytes)
	if got := text(p, "env-sleep-reason-dash-sleep"); got != "requested" {
		t.Errorf("why it sleeps: %q", got)
	}
	if got := text(p, "env-asleep-dash-sleep"); !regexp.MustCompile(`\(` + mode + `\) · asleep \d+[smh] ago`).MatchString(got) {
		t.Errorf("its sleep line %q: want its mode and since when", got)
	}
	if got := text(p, "env-activity-dash-sleep"); !regexp.MustCompile(`^\d+[smh] ago exec\b`).MatchString(got) {
		t.Errorf("its last activity %q: want the exec, a moment ago", got)
	}
	if p.eval(`String(document.querySelector('[data-testid="env-hibernate-dash-sleep"]').disabled && !document.querySelector('[data-testid="env-wake-dash-sleep"]').disabled)`) != "true" {
		t.Error("hibernated: Hibernate should be disabled and Wake enabled")
	}
	v.waitJS("the viewer sees it hibernated", state("dash-sleep")+` === "hibernated" && !!document.querySelector('[data-testid="env-saved-dash-sleep"]')`)
	noSleepButtons("dash-sleep is hibernated")
	p.shot("sleep-01-hibernated")
	v.shot("sleep-02-viewer-hibernated")

	// Its own page says the same, with its Wake.
	q := b.newPage()
	signInAs(q, url, s.Token, "")
	q.do("dash-sleep's page", chromedp.Navigate(url+"#/environment/dash-sleep"), chromedp.WaitVisible(testid("env-asleep-dash-sleep")))
	q.waitJS("its Wake", `!!document.querySelector('[data-testid="env-wake"]') && !document.querySelector('[data-testid="env-wake"]').disabled`)
	q.shot("sleep-03-environment-page-hibernated")

	// A second hibernation is past the limit: refused, and said so.
	p.do("hibernate dash-full", chromedp.Click(testid("env-hibernate-dash-full")))
	p.waitJS("the limit's refusal", `!!document.querySelector('[data-testid="env-sleep-error-dash-full"]')`)
	if got := text(p, "env-sleep-error-dash-full"); !strings.Contains(got, "hibernate_limit") || !strings.Contains(got, "AGENTIC_HIBERNATE_MAX_BYTES") {
		t.Errorf("the hibernate_limit refusal shown as %q", got)
	}
	if got := get("dash-full").State; got != restapi.EnvReady {
		t.Errorf("dash-full after the refusal: %s, want ready", got)
	}
	p.shot("sleep-04-hibernate-limit")

	// Wake: its progress while the container starts and the agent comes
	// back (recorded as the page changes), then ready.
	p.eval(`(() => { window.__seen = []; new MutationObserver(() => {
		const g = document.querySelector('[data-testid="env-sleep-progress-dash-sleep"]');
		if (g && !window.__seen.includes(g.innerText)) window.__seen.push(g.innerText);
		const s = document.querySelector('[data-testid="env-state-dash-sleep"]');
		if (s && s.innerText === "waking" && !window.__seen.includes("pill waking")) window.__seen.push("pill waking");
	}).observe(document.body, {subtree: true, childList: true, characterData: true}); return "" })()`)
	p.do("wake dash-sleep", chromedp.Click(testid("env-wake-dash-sleep")))
	p.waitJS("dash-sleep awake", state("dash-sleep")+` === "ready" && !!document.querySelector('[data-testid="env-sleep-done-dash-sleep"]')`)
	seen := p.eval(`window.__seen.join(" | ")`)
	t.Logf("seen while waking: %s", seen)
	if !strings.Contains(seen, "waking: restoring it and waiting for its agent") {
		t.Errorf("no progress shown while waking (seen: %q)", seen)
	}
	if got := text(p, "env-sleep-done-dash-sleep"); !regexp.MustCompile(`^Awake in [0-9.]+ m?s: its agent is back\.$`).MatchString(got) {
		t.Errorf("the wake's outcome %q", got)
	}
	if p.eval(`String(!!document.querySelector('[data-testid="env-asleep-dash-sleep"]'))`) != "false" {
		t.Error("awake, it still shows its saved state")
	}
	if got := text(p, "env-activity-dash-sleep"); !strings.Contains(got, "wake") {
		t.Errorf("its last activity after the wake: %q", got)
	}
	v.waitJS("the viewer sees it ready", state("dash-sleep")+` === "ready" && !document.querySelector('[data-testid="env-asleep-dash-sleep"]')`)
	q.waitJS("its page sees it ready", `document.querySelector('[data-testid="env-state"]').innerText === "ready" && !document.querySelector('[data-testid="env-asleep-dash-sleep"]')`)
	noSleepButtons("dash-sleep woke")
	if got := strings.TrimSpace(execOut(t, s, "dash-sleep", "cat /tmp/kept")); got != "kept" {
		t.Errorf("a file of before the hibernation: %q", got)
	}
	p.shot("sleep-05-woken")
	v.shot("sleep-06-viewer-woken")

	// dash-full hibernates now (nothing else is saved); with what its agent
	// needs gone from the host, its wake fails: wake_failed, and failed with
	// the reason.
	p.do("hibernate dash-full", chromedp.Click(testid("env-hibernate-dash-full")))
	p.waitJS("dash-full hibernated", state("dash-full")+` === "hibernated" && !!document.querySelector('[data-testid="env-sleep-done-dash-full"]')`)
	secrets, _ := filepath.Glob(filepath.Join(dataDir, "docker-secrets", "*.dash-full.secret"))
	if len(secrets) != 1 {
		t.Fatalf("dash-full's secret files: %v", secrets)
	}
	if err := os.Remove(secrets[0]); err != nil {
		t.Fatal(err)
	}
	p.do("wake dash-full", chromedp.Click(testid("env-wake-dash-full")))
	p.waitJS("the failed wake", `!!document.querySelector('[data-testid="env-sleep-error-dash-full"]')`)
	if got := text(p, "env-sleep-error-dash-full"); !strings.HasPrefix(got, "Wake failed: ") || !strings.Contains(got, "wake_failed") {
		t.Errorf("the failed wake shown as %q: want what failed and its code", got)
	}
	// The reason is the environment's, on every page that shows it (the
	// error under its state: not repeated under the wake's).
	e = get("dash-full")
	if e.State != restapi.EnvFailed || e.Error == nil || !strings.Contains(*e.Error, "/run/agentic-secret") {
		t.Fatalf("dash-full after its failed wake: state %s error %v", e.State, e.Error)
	}
	p.waitJS("its row says why", row("dash-full")+`.includes("wake: docker wake dash-full") && `+row("dash-full")+`.includes("/run/agentic-secret")`)
	v.waitJS("the viewer sees why", row("dash-full")+`.includes("wake: docker wake dash-full")`)
	noSleepButtons("dash-full failed to wake")
	p.shot("sleep-07-wake-failed")
	v.shot("sleep-08-viewer-wake-failed")
}

// checkSize checks that a size the page shows ("12.3 MiB") is n bytes, to
// the shown precision.
func checkSize(t *testing.T, what, shown string, n int64) {
	t.Helper()
	m := regexp.MustCompile(`^(\d+(?:\.\d)?) (B|KiB|MiB|GiB|TiB)$`).FindStringSubmatch(shown)
	if m == nil {
		t.Errorf("%s: %q is not a size in human units", what, shown)
		return
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	unit := map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[m[2]]
	if m[2] == "B" && n >= 1024 || m[2] != "B" && (float64(n) < unit || float64(n) >= 1024*unit) || math.Abs(float64(n)/unit-v) > 0.05 {
		t.Errorf("%s: %q, but %d bytes are saved", what, shown, n)
	}
}
