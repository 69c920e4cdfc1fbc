package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// The dashboard as a new operator meets it in the first hour (issue 27), in
// a real Chromium against the real server with a host agent and no AIWG
// integration: each empty view says what fills it (no Reconnect for an
// integration that is not configured); a terminal is titled by its session's
// name and agent; leaving a shell the page opened asks whether to keep or
// end it (and does what was chosen), leaving one it only joined does not;
// an environment's buttons follow its state and its steps fold once done; a
// failed task's preserved environment links to its task and says when it is
// destroyed. Screenshots (fh-*) go to the test's artifact directory
// (go test -artifacts -outputdir DIR).
func TestDashboardFirstHour(t *testing.T) {
	b := newBrowser(t)
	e := newContract(t, copts{agents: 1, noAIWG: true, env: []string{"AGENTIC_RUNTIMES=host", "AGENTIC_TASK_RUNTIME=host"}})
	s := e.s()
	url := s.RESTURL + "/"
	p := b.newPage()
	signInAs(p, url, s.Token, "")
	text := func(id string) string {
		return `(document.querySelector('[data-testid="` + id + `"]') || {innerText: ""}).innerText`
	}
	exists := func(id string) string { return `!!document.querySelector('[data-testid="` + id + `"]')` }

	// Empty states, each saying what fills it.
	p.waitJS("AIWG not configured", text("aiwg-state")+`.includes("not configured")`)
	p.waitJS("the AIWG card says how to configure it", text("aiwg-card")+`.includes("AIWG_SERVE_ENDPOINT")`)
	p.waitJS("the missions card says where missions come from", `document.body.innerText.includes("missions arrive from aiwg serve once AIWG_SERVE_ENDPOINT is set")`)
	if p.eval(`String(`+exists("aiwg-reconnect")+`)`) != "false" {
		t.Error("a Reconnect button for an AIWG integration that is not configured")
	}
	p.shot("fh-01-overview-unconfigured")
	p.do("missions", chromedp.Click(testid("nav-missions")), chromedp.WaitVisible(testid("missions-empty")))
	if got := p.eval(text("missions-empty")); !strings.Contains(got, "missions arrive from aiwg serve once AIWG_SERVE_ENDPOINT is set") {
		t.Errorf("the missions' empty state: %q", got)
	}
	p.shot("fh-02-missions-empty")
	p.do("sessions", chromedp.Click(testid("nav-sessions")), chromedp.WaitVisible(testid("sessions-empty")))
	if got := p.eval(text("sessions-empty")); !strings.Contains(got, "Open terminal") || !strings.Contains(got, "agenticctl shell") {
		t.Errorf("the sessions' empty state: %q", got)
	}
	p.shot("fh-03-sessions-empty")
	p.do("tasks", chromedp.Click(testid("nav-tasks")), chromedp.WaitVisible(testid("tasks-empty")))
	if got := p.eval(text("tasks-empty")); !strings.Contains(got, "New task") || !strings.Contains(got, "agenticctl task submit") {
		t.Errorf("the tasks' empty state: %q", got)
	}
	p.shot("fh-04-tasks-empty")
	p.do("environments", chromedp.Click(testid("nav-environments")), chromedp.WaitVisible(testid("envs-empty")))
	if got := p.eval(text("envs-empty")); !strings.Contains(got, "create one above") {
		t.Errorf("the environments' empty state: %q", got)
	}
	p.shot("fh-05-environments-empty")

	// A terminal this page opened: titled by its session's name and agent.
	p.do("agents", chromedp.Click(testid("nav-agents")), chromedp.WaitVisible(testid("open-terminal-host-01")))
	kept := openShell(t, p, e)
	p.shot("fh-06-terminal-titled")

	// Leaving it asks; "Stay here" stays.
	p.do("leave for sessions", chromedp.Click(testid("nav-sessions")), chromedp.WaitVisible(testid("leave-dialog")))
	p.shot("fh-07-leave-dialog")
	if h := p.eval(`location.hash`); h != "#/session/"+kept {
		t.Errorf("the address while the dialog asks: %q", h)
	}
	p.do("stay", chromedp.Click(testid("leave-stay")))
	p.waitJS("the dialog gone, the terminal still there", `!`+exists("leave-dialog")+` && `+exists("terminal"))
	// "Keep it running": the page goes, the shell stays.
	p.do("leave again", chromedp.Click(testid("nav-sessions")), chromedp.WaitVisible(testid("leave-dialog")))
	p.do("keep it", chromedp.Click(testid("leave-keep")), chromedp.WaitVisible(testid("session-row-"+kept)))
	if st := string(sessionState(t, e.s(), kept)); st != "running" {
		t.Errorf("the kept shell is %s", st)
	}
	// Joined rather than opened: leaving it asks nothing.
	p.do("attach to the kept shell", chromedp.Navigate(url+"#/session/"+kept), chromedp.WaitVisible(testid("terminal")))
	p.waitJS("joined", text("terminal-role")+` === "observer"`)
	p.do("leave the joined shell", chromedp.Click(testid("nav-overview")))
	p.waitJS("left without a question", `location.hash === "#/overview" && `+exists("aiwg-card")+` && !`+exists("leave-dialog"))
	// "End the shell": the page goes and the shell ends.
	p.do("agents", chromedp.Click(testid("nav-agents")), chromedp.WaitVisible(testid("open-terminal-host-01")))
	ended := openShell(t, p, e)
	p.do("leave the second shell", chromedp.Click(testid("nav-sessions")), chromedp.WaitVisible(testid("leave-dialog")))
	p.do("end it", chromedp.Click(testid("leave-end")), chromedp.WaitVisible(testid("session-row-"+ended)))
	testkit.Eventually(t, patience, "the ended shell not running", func() bool {
		st := string(sessionState(t, e.s(), ended))
		return st != "running" && st != "starting"
	})
	p.waitJS("the sessions view says it ended", `!`+text("session-row-"+ended)+`.includes("running")`)
	if st := string(sessionState(t, e.s(), kept)); st != "running" {
		t.Errorf("the kept shell is %s after the other was ended", st)
	}
	p.shot("fh-08-sessions-kept-and-ended")

	// An environment's buttons follow its state; its steps fold once done.
	p.do("environments", chromedp.Click(testid("nav-environments")), chromedp.WaitVisible(testid("env-name")))
	p.waitJS("the runtimes offered", `document.querySelector('[data-testid="env-runtime"]').value === "host"`)
	p.do("create one", chromedp.SendKeys(testid("env-name"), "fh-env"), chromedp.Click(testid("env-create")), chromedp.WaitVisible(testid("env-row-fh-env")))
	p.waitJS("the environment ready", text("env-row-fh-env")+`.includes("ready")`)
	enabled := func(id string) string { return `!document.querySelector('[data-testid="` + id + `"]').disabled` }
	p.waitJS("ready: Stop and Delete, not Start", `!(`+enabled("env-start-fh-env")+`) && `+enabled("env-stop-fh-env")+` && `+enabled("env-delete-fh-env"))
	p.waitJS("its steps folded into one line", `(() => { const d = document.querySelector('[data-testid="env-steps-fh-env"]');
		return !!d && !d.open && d.querySelector("summary").innerText.includes("last agent_ready") && d.querySelectorAll("li").length > 1 })()`)
	if why := p.eval(`document.querySelector('[data-testid="env-start-fh-env"]').title`); !strings.Contains(why, "only a stopped") {
		t.Errorf("a disabled Start does not say why: %q", why)
	}
	p.shot("fh-09-environment-ready")
	p.do("stop it", chromedp.Click(testid("env-stop-fh-env")))
	p.waitJS("the environment stopped", text("env-row-fh-env")+`.includes("stopped")`)
	p.waitJS("stopped: Start and Delete, not Stop", enabled("env-start-fh-env")+` && !(`+enabled("env-stop-fh-env")+`) && `+enabled("env-delete-fh-env"))
	p.shot("fh-10-environment-stopped")
	p.do("start it", chromedp.Click(testid("env-start-fh-env")))
	p.waitJS("ready again", text("env-row-fh-env")+`.includes("ready") && !(`+enabled("env-start-fh-env")+`)`)
	p.do("delete it", chromedp.Click(testid("env-delete-fh-env")))
	p.waitJS("the environment gone", `!`+exists("env-row-fh-env"))

	// A failed task whose environment is preserved.
	p.do("new task", chromedp.Navigate(url+"#/newtask"), chromedp.WaitVisible(testid("manifest")))
	setManifest(p, "metadata: {name: fh-fail}\ncommand: {argv: [sh, -c, \"echo evidence > clue.txt; exit 3\"]}\nenvironment: {runtime: host}\nlifecycle: {failure_action: preserve, preserve_for: 1h}\n")
	p.waitJS("the manifest valid", text("manifest-valid")+` === "valid"`)
	p.do("submit", chromedp.Click(testid("task-submit")), chromedp.WaitVisible(testid("task-state")))
	p.waitJS("the task failed, preserved", text("task-state")+` === "failed_preserved"`)
	taskID := strings.TrimPrefix(p.eval(`location.hash`), "#/task/")
	ctx, cancel := ctxFor(patience)
	defer cancel()
	tr, err := e.op().GetTaskWithResponse(ctx, taskID)
	if err != nil || tr.JSON200 == nil || tr.JSON200.PreserveUntil == nil {
		t.Fatalf("the task %q: %v %v", taskID, err, tr)
	}
	envName, until := tr.JSON200.Environment.Name, tr.JSON200.PreserveUntil.UnixMilli()
	p.waitJS("the task page says until when", text("task-preserved")+`.includes("kept for inspection until") && `+text("task-preserved")+`.includes("`+envName+`")`)
	p.shot("fh-11-task-preserved")
	p.do("environments", chromedp.Click(testid("nav-environments")), chromedp.WaitVisible(testid("env-row-"+envName)))
	p.waitJS("the preserved environment links to its task", fmt.Sprintf(`(() => { const a = document.querySelector('[data-testid="env-task-%s"] a');
		return !!a && a.getAttribute("href") === "#/task/%s" && a.innerText === "fh-fail" })()`, envName, taskID))
	p.waitJS("and says when it is destroyed", fmt.Sprintf(`(() => { const d = document.querySelector('[data-testid="env-preserved-%s"]');
		return !!d && d.innerText.includes("then destroyed") && / \(in (59m|60m|1h 0m)\), then destroyed$/.test(d.innerText.trim()) && new Date(d.querySelector("time").getAttribute("datetime")).getTime() === %d })()`, envName, until))
	p.shot("fh-12-environment-preserved")
	p.do("follow the link", chromedp.Click(chromedp.CSS(`[data-testid="env-task-`+envName+`"] a`)), chromedp.WaitVisible(testid("task-preserved")))
	if h := p.eval(`location.hash`); h != "#/task/"+taskID {
		t.Errorf("the link led to %q", h)
	}
}

// The network choices a create offers are those the server allows
// (AGENTIC_ALLOWED_NETWORKS, through GET /api/v1/runtimes'
// allowed_network_modes), on a Docker runtime that itself offers more; with
// the AIWG integration configured, the overview has its Reconnect and the
// empty missions view names the aiwg serve it waits for.
func TestDashboardNetworkChoicesAndAIWG(t *testing.T) {
	host := privateDockerd(t)
	b := newBrowser(t)
	e := newContract(t, copts{env: []string{"DOCKER_HOST=" + host, "AGENTIC_RUNTIMES=docker", "AGENTIC_ALLOWED_NETWORKS=none,proxy"}})
	s := e.s()
	url := s.RESTURL + "/"

	ctx, cancel := ctxFor(patience)
	defer cancel()
	rr, err := e.op().ListRuntimesWithResponse(ctx)
	if err != nil || rr.JSON200 == nil {
		t.Fatalf("runtimes: %v %v", err, rr)
	}
	var docker *restapi.Runtime
	for i := range rr.JSON200.Runtimes {
		if rr.JSON200.Runtimes[i].Runtime == "docker" {
			docker = &rr.JSON200.Runtimes[i]
		}
	}
	if docker == nil || !slices.Contains(docker.NetworkModes, "bridge") {
		t.Fatalf("docker with bridge among its modes: %+v", rr.JSON200.Runtimes)
	}
	var want []string
	for _, m := range docker.NetworkModes {
		if m == "none" || m == "proxy" {
			want = append(want, m)
		}
	}
	if !slices.Equal(docker.AllowedNetworkModes, want) {
		t.Errorf("allowed_network_modes %v, want %v (AGENTIC_ALLOWED_NETWORKS=none,proxy of %v)", docker.AllowedNetworkModes, want, docker.NetworkModes)
	}

	p := b.newPage()
	signInAs(p, url, s.Token, "")
	p.waitJS("AIWG connected", `(document.querySelector('[data-testid="aiwg-state"]') || {innerText: ""}).innerText.trim() === "connected"`)
	p.do("reconnect", chromedp.Click(testid("aiwg-reconnect")))
	p.waitJS("the missions card says missions come from the configured aiwg serve", `document.body.innerText.includes("none yet: missions arrive from aiwg serve (")`)
	if got := p.eval(`(document.querySelector('[data-testid="aiwg-card"] .error') || {innerText: ""}).innerText`); got != "" {
		t.Errorf("reconnect: %s", got)
	}
	p.shot("fh-20-overview-configured")
	p.do("missions", chromedp.Click(testid("nav-missions")), chromedp.WaitVisible(testid("missions-empty")))
	p.shot("fh-21-missions-empty-configured")

	p.do("environments", chromedp.Click(testid("nav-environments")), chromedp.WaitVisible(testid("env-network")))
	p.waitJS("docker chosen", `document.querySelector('[data-testid="env-runtime"]').value === "docker"`)
	var options []string
	_ = json.Unmarshal([]byte(p.eval(`JSON.stringify([...document.querySelectorAll('[data-testid="env-network"] option')].map(o => o.value))`)), &options)
	wantOptions := []string{""} // the runtime's default
	for _, m := range docker.AllowedNetworkModes {
		if m != docker.NetworkModes[0] {
			wantOptions = append(wantOptions, m)
		}
	}
	if !slices.Equal(options, wantOptions) {
		t.Errorf("network choices %q, want %q (the default, then the allowed)", options, wantOptions)
	}
	if note := p.eval(`(document.querySelector('[data-testid="env-network-note"]') || {innerText: ""}).innerText`); !strings.Contains(note, "bridge") || !strings.Contains(note, "AGENTIC_ALLOWED_NETWORKS") {
		t.Errorf("no word of the modes the server does not allow: %q", note)
	}
	p.eval(`(() => { const s = document.querySelector('[data-testid="env-network"]'); s.value = "proxy"; s.dispatchEvent(new Event("change", {bubbles: true})); return "" })()`)
	p.do("the allowed hosts field for proxy", chromedp.WaitVisible(testid("env-allowed-hosts")))
	p.shot("fh-22-network-choices")
}

// openShell opens a terminal on host-01 from the Agents view and checks its
// title names the session and its agent, never its id.
func openShell(t *testing.T, p *page, e *cenv) string {
	t.Helper()
	p.do("open a terminal", chromedp.Click(testid("open-terminal-host-01")), chromedp.WaitVisible(testid("terminal")))
	p.waitJS("the controller role", `document.querySelector('[data-testid="terminal-role"]').innerText === "controller"`)
	p.waitJS("the session in the address", `location.hash.startsWith("#/session/")`)
	id := strings.TrimPrefix(p.eval(`location.hash`), "#/session/")
	ctx, cancel := ctxFor(patience)
	defer cancel()
	r, err := e.op().GetSessionWithResponse(ctx, id)
	if err != nil || r.JSON200 == nil {
		t.Fatalf("session %q: %v %v", id, err, r)
	}
	name := r.JSON200.Name
	p.waitJS("the title", `document.querySelector('[data-testid="terminal-title"]').innerText === "Terminal `+name+` on host-01"`)
	if title := p.eval(`document.title`); !strings.HasPrefix(title, name+" on host-01") {
		t.Errorf("the tab's title %q", title)
	}
	if strings.Contains(p.eval(`document.querySelector("main").innerText`), id) {
		t.Errorf("the terminal page shows its session's id %s", id)
	}
	return id
}
