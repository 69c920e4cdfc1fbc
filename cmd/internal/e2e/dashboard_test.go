package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The dashboard in a real Chromium against the real server with a real host
// agent and the fake aiwg: sign in, agents, a terminal typed into, an
// observer who takes control, the server killed and restarted under an open
// terminal, an environment created and deleted, a task submitted from the
// form and followed to its diff and artifact, a mission's HITL answered from
// the inbox. Screenshots of each view go to the test's artifact directory
// (go test -artifacts -outputdir DIR).
func TestDashboard(t *testing.T) {
	b := newBrowser(t)
	repo := baseRepo(t, "a")
	e := newContract(t, copts{agents: 1, env: []string{"AGENTIC_RUNTIMES=host", "AGENTIC_TASK_RUNTIME=host"}})
	url := e.s().RESTURL + "/"

	p := b.newPage()
	signInAs(p, url, e.s().Token, "bad-token")
	p.shot("01-overview")

	// Agents, then a new shell that is ours to type into at once.
	p.do("agents", chromedp.Navigate(url+"#/agents"), chromedp.WaitVisible(testid("agent-row-host-01")))
	p.shot("02-agents")
	p.do("open a terminal", chromedp.Click(testid("open-terminal-host-01")), chromedp.WaitVisible(testid("terminal")))
	p.waitJS("the controller role", `document.querySelector('[data-testid="terminal-role"]').innerText === "controller"`)
	p.typeKeys("echo $((6*7))\r")
	p.waitJS("42 in the terminal", `(document.querySelector('[data-testid="terminal"] .xterm-rows')||{innerText:""}).innerText.split("\n").some(l => l.trim() === "42")`)
	p.shot("03-terminal")
	// Resize follows the window: the shell sees the new size.
	p.typeKeys("stty size\r")
	p.waitJS("a size", `/^\d+ \d+$/m.test(document.querySelector('[data-testid="terminal"] .xterm-rows').innerText)`)
	first := p.eval(`document.querySelector('[data-testid="terminal"] .xterm-rows').innerText.match(/^(\d+ \d+)$/m)[1]`)
	p.do("a narrower window", chromedp.EmulateViewport(700, 600))
	// Asked again until the resize has reached the shell.
	p.typeUntil("the new size", "clear; stty size\r", fmt.Sprintf(`(() => { const m = document.querySelector('[data-testid="terminal"] .xterm-rows').innerText.match(/^(\d+ \d+)$/m); return !!m && m[1] !== %q })()`, first))
	p.shot("03b-terminal-narrow")
	p.do("the window back", chromedp.EmulateViewport(1280, 800))
	sessionID := strings.TrimPrefix(p.eval(`location.hash`), "#/session/")
	if sessionID == "" || strings.Contains(sessionID, "/") {
		t.Fatalf("the terminal's session is not in the address: %q", p.eval(`location.hash`))
	}

	// A second operator joins as an observer: typing does nothing until
	// they take control.
	o := b.newPage()
	signInAs(o, url, e.s().Token, "")
	o.do("join as observer", chromedp.Navigate(url+"#/session/"+sessionID), chromedp.WaitVisible(testid("terminal")))
	o.waitJS("the observer role", `document.querySelector('[data-testid="terminal-role"]').innerText === "observer"`)
	// In a taller window, the observer still shows the session at the
	// controller's size: what tmux draws for that size, nothing stale below.
	o.do("a taller window", chromedp.EmulateViewport(1280, 1000))
	rows := `document.querySelector('[data-testid="terminal"] .xterm-rows').children.length`
	p.waitJS("the controller's terminal fitted", rows+` > 0`)
	o.waitJS("the observer at the controller's size", rows+` === `+p.eval("String("+rows+")"))
	p.do("focus the controller's terminal", chromedp.Click(testid("terminal")))
	p.typeKeys("echo seen-by-$((1+1))\r")
	o.waitJS("the controller's output in the observer's terminal", `document.querySelector('[data-testid="terminal"] .xterm-rows').innerText.includes("seen-by-2")`)
	o.do("focus", chromedp.Click(testid("terminal")))
	o.typeKeys("echo observer-typed\r")
	time.Sleep(time.Second)
	if strings.Contains(p.termRows(), "observer-typed") {
		t.Fatal("an observer's keys reached the shell")
	}
	o.do("take control", chromedp.Click(testid("take-control")))
	o.waitJS("the controller role", `document.querySelector('[data-testid="terminal-role"]').innerText === "controller"`)
	o.do("focus", chromedp.Click(testid("terminal")))
	o.typeKeys("echo taken-$((40+2))\r")
	p.waitJS("the new controller's command in the first page", `document.querySelector('[data-testid="terminal"] .xterm-rows').innerText.includes("taken-42")`)
	o.shot("04-observer-took-control")

	// The server goes away under the open terminal and comes back: the page
	// says so, reconnects by itself and goes on from where it was.
	rowsBefore := p.termRows()
	before := strings.Count(rowsBefore, "taken-42")
	e.kill()
	p.waitJS("the offline banner", `!!document.querySelector('[data-testid="offline"]') || document.querySelector('[data-testid="terminal-status"]').innerText.includes("reconnecting")`)
	p.shot("05-offline")
	e.startWith(true)
	p.waitJS("connected again", `document.querySelector('[data-testid="terminal-status"]').innerText.startsWith("connected")`)
	o.do("focus", chromedp.Click(testid("terminal")))
	o.waitJS("the second page connected again", `document.querySelector('[data-testid="terminal-status"]').innerText.startsWith("connected")`)
	o.waitJS("still the controller", `document.querySelector('[data-testid="terminal-role"]').innerText === "controller"`)
	o.do("focus", chromedp.Click(testid("terminal")))
	o.typeKeys("echo after-$((1+1))-restart\r")
	p.waitJS("output after the restart", `document.querySelector('[data-testid="terminal"] .xterm-rows').innerText.includes("after-2-restart")`)
	if rowsAfter := p.termRows(); strings.Count(rowsAfter, "taken-42") != before {
		t.Errorf("output before the restart shown %d times after it, was %d: doubled or lost\nbefore:\n%s\nafter:\n%s",
			strings.Count(rowsAfter, "taken-42"), before, rowsBefore, rowsAfter)
	}
	p.shot("06-terminal-after-restart")

	// Environments: create one and watch it come up, then delete it. The
	// shell this page opened is still running: leaving asks, and it is kept.
	p.do("environments", chromedp.Navigate(url+"#/environments"), chromedp.WaitVisible(testid("leave-dialog")))
	p.do("keep the shell", chromedp.Click(testid("leave-keep")), chromedp.WaitVisible(testid("env-name")))
	p.waitJS("the runtimes offered", `document.querySelector('[data-testid="env-runtime"]').value === "host"`)
	p.do("create one", chromedp.SendKeys(testid("env-name"), "dash-env"), chromedp.Click(testid("env-create")), chromedp.WaitVisible(testid("env-row-dash-env")))
	p.waitJS("the environment ready", `document.querySelector('[data-testid="env-row-dash-env"]').innerText.includes("ready")`)
	p.waitJS("its steps", `document.querySelector('[data-testid="env-row-dash-env"]').innerText.includes("agent_ready")`)
	p.shot("07-environments")
	p.do("delete it", chromedp.Click(testid("env-delete-dash-env")))
	p.waitJS("the environment gone", `!document.querySelector('[data-testid="env-row-dash-env"]')`)

	// A warm pool from the form; a create of its spec takes its member.
	p.do("define a pool", chromedp.SendKeys(testid("pool-name"), "dash-pool"), chromedp.Click(testid("pool-put")), chromedp.WaitVisible(testid("pool-row-dash-pool")))
	poolCell := func(i int) string {
		return `document.querySelector('[data-testid="pool-row-dash-pool"]').children[` + fmt.Sprint(i) + `].innerText.trim()`
	}
	p.waitJS("its member idle", poolCell(3)+` === "1"`)
	p.do("create from it", chromedp.SendKeys(testid("env-name"), "dash-pooled"), chromedp.Click(testid("env-create")), chromedp.WaitVisible(testid("env-row-dash-pooled")))
	// Its steps are folded once it is ready: "taken" is among them.
	p.waitJS("taken, ready", `document.querySelector('[data-testid="env-row-dash-pooled"]').textContent.includes("taken") && document.querySelector('[data-testid="env-row-dash-pooled"]').innerText.includes("ready")`)
	p.waitJS("the hit counted and the pool refilled", poolCell(5)+` === "1" && `+poolCell(3)+` === "1"`)
	p.shot("07b-pools")
	p.do("delete them", chromedp.Click(testid("env-delete-dash-pooled")), chromedp.Click(testid("pool-delete-dash-pool")))
	p.waitJS("both gone", `!document.querySelector('[data-testid="env-row-dash-pooled"]') && !document.querySelector('[data-testid="pool-row-dash-pool"]')`)

	// A task from the form: an invalid field shows its error at once.
	p.do("new task", chromedp.Navigate(url+"#/newtask"), chromedp.WaitVisible(testid("manifest")))
	setManifest(p, "command: {argv: [\"true\"]}\nenvironment: {memory: lots}\n")
	p.waitJS("the field's error", `[...document.querySelectorAll('[data-testid="manifest-error"]')].some(e => e.innerText.includes("environment.memory"))`)
	p.shot("08-task-form-error")
	setManifest(p, "metadata: {name: dash-task}\nrepository: {url: "+repo+"}\ncommand: {argv: [sh, -c, \"echo changed >> a.txt; echo report > REPORT.md\"]}\nenvironment: {runtime: host}\nlifecycle: {artifact_patterns: [REPORT.md]}\n")
	p.waitJS("the manifest valid", `!!document.querySelector('[data-testid="manifest-valid"]') && document.querySelector('[data-testid="manifest-valid"]').innerText === "valid"`)
	p.do("submit", chromedp.Click(testid("task-submit")), chromedp.WaitVisible(testid("task-state")))
	p.waitJS("the task completed", `document.querySelector('[data-testid="task-state"]').innerText === "completed"`)
	p.waitJS("its diff", `!!document.querySelector('[data-testid="diff"]') && document.querySelector('[data-testid="diff"]').innerText.includes("+changed")`)
	p.shot("09-task")
	// The artifact downloads through the page's session, and its sha256
	// is the one listed.
	listed := p.eval(`document.querySelector('[data-testid="artifact-REPORT.md"] code').innerText`)
	var got struct{ Body string }
	raw := p.evalAsync(`fetch(document.querySelector('[data-testid="artifact-REPORT.md"] a').href).then(r => r.text()).then(t => JSON.stringify({Body: t}))`)
	_ = json.Unmarshal([]byte(raw), &got)
	if got.Body != "report\n" || sha256Hex([]byte(got.Body)) != listed {
		t.Errorf("artifact %q (sha256 %s), listed %s", got.Body, sha256Hex([]byte(got.Body)), listed)
	}
	p.do("tasks list", chromedp.Navigate(url+"#/tasks"))
	p.waitJS("the task's row", `[...document.querySelectorAll('[data-testid^="task-row-"]')].some(r => r.innerText.includes("dash-task"))`)
	p.shot("10-tasks")

	// A mission asks a human; the inbox answers it and the mission goes on.
	e.dispatch("m-dash", hitlObjective)
	e.waitEvent("m-dash", evHITLRequired, patience)
	p.do("inbox", chromedp.Navigate(url+"#/hitl"))
	p.waitJS("the request in the inbox", `!!document.querySelector('[data-testid^="hitl-row-"]')`)
	p.shot("11-hitl")
	hitlID := strings.TrimPrefix(p.eval(`document.querySelector('[data-testid^="hitl-row-"]').dataset.testid`), "hitl-row-")
	p.do("answer", chromedp.SendKeys(testid("hitl-text-"+hitlID), "y"), chromedp.Click(testid("hitl-send-"+hitlID)))
	e.waitEvent("m-dash", evResumed, patience)
	if end := e.waitEnd("m-dash", patience); end.Event != evCompleted {
		t.Errorf("the mission after the inbox's answer: %s %v", end.Event, end.Data)
	}
	p.do("missions", chromedp.Navigate(url+"#/missions"), chromedp.WaitVisible(testid("mission-row-m-dash")))
	p.waitJS("the mission's timeline", `["assigned", "started", "hitl_required", "resumed", "completed"].every(e => document.querySelector('[data-testid="mission-timeline-m-dash"]').innerText.includes(e))`)
	p.shot("12-missions")
	p.do("sessions", chromedp.Navigate(url+"#/sessions"), chromedp.WaitVisible(testid("session-row-"+sessionID)))
	p.waitJS("its viewers", `document.querySelector('[data-testid="session-row-`+sessionID+`"]').innerText.includes("1 controller")`)
	p.shot("13-sessions")
}

// signInAs opens the dashboard, tries a wrong token when given one (an
// error, still signed out), then signs in with the right one.
func signInAs(p *page, url, token, wrong string) {
	p.t.Helper()
	p.do("open the dashboard", chromedp.Navigate(url), chromedp.WaitVisible(testid("signin-token")))
	if wrong != "" {
		p.do("a wrong token", chromedp.SendKeys(testid("signin-token"), wrong), chromedp.Click(testid("signin-submit")))
		p.waitJS("the sign-in error", `!!document.querySelector('.signin .error')`)
		p.shot("00-signin-refused")
		p.do("open it again", chromedp.Reload(), chromedp.WaitVisible(testid("signin-token")))
	}
	p.do("sign in", chromedp.SendKeys(testid("signin-token"), token), chromedp.Click(testid("signin-submit")), chromedp.WaitVisible(testid("nav-agents")))
}

// setManifest replaces the manifest editor's text as typing would.
func setManifest(p *page, doc string) {
	p.t.Helper()
	b, _ := json.Marshal(doc)
	p.eval(`(() => { const t = document.querySelector('[data-testid="manifest"]'); t.value = ` + string(b) + `; t.dispatchEvent(new Event("input", {bubbles: true})); return "" })()`)
}
