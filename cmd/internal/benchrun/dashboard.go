package main

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// dashboardBench: the first load's size (gzip, as transferred), the time to
// a rendered agent list in headless Chromium, and keystroke → echo in the
// browser's terminal beside the WebSocket echo of the same server.
func dashboardBench(bins harness.Binaries) error {
	srv, stop, err := hostServer(bins, "dash", []string{"AGENTIC_RUNTIMES=host"}, nil)
	if err != nil {
		return err
	}
	defer stop()
	dataDir := srv.DataDir
	url := srv.RESTURL + "/"
	total, parts, err := firstLoadBytes(url)
	if err != nil {
		return err
	}
	fmt.Printf("\n## Dashboard (headless Chromium %s, loopback)\n\n", chromiumVersion())
	fmt.Printf("first load, gzip as transferred: %.1f KiB (%s) (goal < 400 KiB)\n\n", float64(total)/1024, parts)

	bctx, closeBrowser, err := signedInBrowser(srv, url, dataDir+"/chromium")
	if err != nil {
		return err
	}
	defer closeBrowser()
	step := func(steps ...chromedp.Action[chromedp.Void]) error {
		c, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		return chromedp.Do(c, steps...)
	}
	// A fresh page each time (cache kept, as a returning operator has it).
	agentList, err := measure("navigate → agent list rendered (signed in, cache warm)", 10, func() error {
		return step(chromedp.Navigate("about:blank"), chromedp.Navigate(url+"#/agents"), chromedp.WaitVisible(chromedp.CSS(`[data-testid="agent-row-host-01"]`)))
	})
	if err != nil {
		return fmt.Errorf("agent list: %w", err)
	}
	cold, err := measure("navigate → agent list rendered (signed in, cache cleared)", 5, func() error {
		return step(chromedp.Navigate("about:blank"), chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Call(ctx, network.ClearBrowserCache, cdp.Empty{})
			return err
		}), chromedp.Navigate(url+"#/agents"),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid="agent-row-host-01"]`)))
	})
	if err != nil {
		return fmt.Errorf("agent list, cache cleared: %w", err)
	}
	if os.Getenv("BENCH_DEBUG") != "" {
		v, err := chromedp.Run(bctx, chromedp.Evaluate[[]float64](`new Promise((res) => {
		  const ws = new WebSocket(document.querySelector('meta[name="agentic-ws"]').content); const out = []; let t0 = 0;
		  ws.onopen = () => { t0 = performance.now(); ws.send(JSON.stringify({type: "ping"})); };
		  ws.onmessage = () => { out.push(performance.now() - t0); if (out.length >= 20) { ws.close(); res(out); } else { setTimeout(() => { t0 = performance.now(); ws.send(JSON.stringify({type: "ping"})); }, 5); } };
		})`, chromedp.EvalAwaitPromise))
		fmt.Println("page WebSocket ping → pong (ms):", v, err)
	}
	echoes, err := browserEcho(bctx, url, 200, "")
	if err != nil {
		return fmt.Errorf("browser echo: %w", err)
	}
	// Headless Chromium has no display: its frames follow a simulated 60 Hz
	// clock, and an echo waits for one or two of them. The same run with the
	// clock unthrottled shows what the page and the browser's own input and
	// WebSocket paths cost without that wait; a blank page with a text field
	// is the floor of the input path.
	fast, closeFast, err := signedInBrowser(srv, url, dataDir+"/chromium-unthrottled", chromedp.Flag("disable-frame-rate-limit", true), chromedp.Flag("disable-gpu-vsync", true))
	if err != nil {
		return err
	}
	defer closeFast()
	fastEchoes, err := browserEcho(fast, url, 200, ", frame clock unthrottled")
	if err != nil {
		return fmt.Errorf("browser echo, frame clock unthrottled: %w", err)
	}
	floor, err := blankPageKeyFloor(fast, 100)
	if err != nil {
		return fmt.Errorf("blank page: %w", err)
	}
	echoes = append(append(echoes, fastEchoes...), floor)
	deadline := time.Now().Add(2 * time.Minute)
	ws, err := wsShellEcho(srv, "host-01", "WebSocket `input` → the same kind of shell (start_shell, tmux) → `output`", 200, deadline)
	if err != nil {
		return err
	}
	wsCat, err := wsEcho(srv, 200, deadline, nil)
	if err != nil {
		return err
	}
	fmt.Println("| measurement | n | p50 | p99 | mean |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	for _, s := range append(append([]stats{agentList, cold}, echoes...), ws, wsCat) {
		fmt.Printf("| %s | %d | %s | %s | %s |\n", s.name, s.n, ms(s.p50), ms(s.p99), ms(s.avg))
	}
	fmt.Printf("\nbrowser echo p50 − WebSocket echo p50 = %s; frame clock unthrottled: %s (goal: a couple of ms at most)\n", ms(echoes[0].p50-ws.p50), ms(fastEchoes[0].p50-ws.p50))
	return nil
}

var assetRef = regexp.MustCompile(`(?:src|href)="(/assets/[^"]+)"`)

// firstLoadBytes fetches the page and its assets as a browser would, with
// gzip, and adds up the bytes on the wire.
func firstLoadBytes(url string) (int, string, error) {
	get := func(u string) ([]byte, int, error) {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			return nil, 0, err
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, 0, err
		}
		body := raw
		if resp.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(strings.NewReader(string(raw)))
			if err != nil {
				return nil, 0, err
			}
			body, _ = io.ReadAll(zr)
		}
		return body, len(raw), nil
	}
	page, n, err := get(url)
	if err != nil {
		return 0, "", err
	}
	total := n
	parts := []string{fmt.Sprintf("page %d B", n)}
	base := strings.TrimSuffix(url, "/")
	for _, m := range assetRef.FindAllStringSubmatch(string(page), -1) {
		_, n, err := get(base + m[1])
		if err != nil {
			return 0, "", err
		}
		total += n
		parts = append(parts, fmt.Sprintf("%s %.1f KiB", strings.SplitN(m[1], "?", 2)[0], float64(n)/1024))
	}
	return total, strings.Join(parts, ", "), nil
}

// signedInBrowser starts headless Chromium (with extra flags) and signs in.
func signedInBrowser(srv *harness.Server, url, userDataDir string, extra ...chromedp.ExecAllocatorOption) (context.Context, func(), error) {
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(harness.ChromiumOptions(harness.ChromiumPath(), userDataDir), extra...)...)
	bctx, cancelB := chromedp.NewContext(alloc)
	closeAll := func() { cancelB(); cancelAlloc() }
	if err := chromedp.Do(bctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`[data-testid="signin-token"]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid="signin-token"]`), srv.Token), chromedp.Click(chromedp.CSS(`[data-testid="signin-submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="nav-agents"]`))); err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("signing in: %w", err)
	}
	return bctx, closeAll, nil
}

// pressKey sends one key down and up, as a person's key press arrives.
func pressKey(ctx context.Context, text string) error {
	return chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		down := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyDown, Text: text, Key: text}
		if _, err := chromedp.Call(ctx, input.DispatchKeyEvent, down); err != nil {
			return err
		}
		down.Type, down.Text = input.DispatchKeyEventTypeKeyUp, ""
		_, err := chromedp.Call(ctx, input.DispatchKeyEvent, down)
		return err
	}))
}

// afterKeyProbe, installed in a page, times from each keydown until the
// page's main thread can run its next task: how long the browser itself
// keeps that thread busy after a key (any WebSocket message waits as long).
const afterKeyProbe = `(() => { window.__free = [];
  document.addEventListener("keydown", () => { const t = performance.now(); const ch = new MessageChannel();
    ch.port1.onmessage = () => window.__free.push(performance.now() - t); ch.port2.postMessage(0); }, true);
  return true })()`

// browserEcho opens a new shell in the dashboard and times, inside the
// page, each keydown until the terminal's rows show the character.
func browserEcho(bctx context.Context, url string, n int, label string) ([]stats, error) {
	c, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()
	if err := chromedp.Do(c, chromedp.Navigate(url+"#/terminal/new/host-01"), chromedp.WaitVisible(chromedp.CSS(`[data-testid="terminal"] .xterm-rows`))); err != nil {
		return nil, err
	}
	wait := func(js string) error {
		for {
			v, err := chromedp.Run(c, chromedp.Evaluate[bool](js))
			if err != nil {
				return err
			}
			if v {
				return nil
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	if err := wait(`document.querySelector('[data-testid="terminal-role"]').innerText === "controller" && document.querySelector('[data-testid="terminal"] .xterm-rows').innerText.trim().length > 0`); err != nil {
		return nil, err
	}
	const hook = `(() => {
	  const rows = document.querySelector('[data-testid="terminal"] .xterm-rows');
	  const count = () => (rows.innerText.match(/q/g) || []).length;
	  window.__lat = []; let t0 = 0, want = 0;
	  window.__recv = [];
	  // The first output frame after each key (term.ts calls recv).
	  let seen = true;
	  document.addEventListener("keydown", () => { seen = false; }, true);
	  window.__agenticBench = { recv: (t) => { if (t0 && !seen) { seen = true; window.__recv.push(t - t0); } } };
	  document.addEventListener("keydown", () => { t0 = performance.now(); want = count() + 1; }, true);
	  new MutationObserver(() => { if (t0 && count() >= want) { window.__lat.push(performance.now() - t0); t0 = 0; if (window.__woke) window.__woke(); } })
	    .observe(rows, {subtree: true, childList: true, characterData: true});
	  return true })()`
	if err := wait(hook); err != nil {
		return nil, err
	}
	if err := wait(afterKeyProbe); err != nil {
		return nil, err
	}
	warm := 10
	for i := range n + warm {
		if i > 0 && i%60 == 0 {
			// A fresh line now and then: the shell's line editor stays short.
			if err := pressKey(c, "\x15"); err != nil {
				return nil, err
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := pressKey(c, "q"); err != nil {
			return nil, err
		}
		// One pending evaluation per key, woken by the page: polling from
		// here would queue tasks on the very thread being measured.
		if _, err := chromedp.Run(c, chromedp.Evaluate[bool](fmt.Sprintf(`new Promise((res) => {
		  const done = () => window.__lat.length >= %d; if (done()) return res(true);
		  window.__woke = () => { if (done()) { window.__woke = null; res(true); } }; })`, i+1), chromedp.EvalAwaitPromise)); err != nil {
			return nil, err
		}
	}
	var out []stats
	for _, m := range []struct{ name, js string }{
		{"browser keydown → echo in the xterm.js rows (new shell in tmux)", `window.__lat`},
		{"browser keydown → the echo's WebSocket message in the page", `window.__recv`},
		{"browser keydown → the page's main thread free again", `window.__free`},
	} {
		v, err := chromedp.Run(c, chromedp.Evaluate[[]float64](m.js))
		if err != nil {
			return nil, err
		}
		out = append(out, summarize(m.name+label, millis(v[min(warm, len(v)):])))
	}
	return out, nil
}

// blankPageKeyFloor: keydown → main thread free on a page with nothing but
// a focused text field, the browser's own floor for handling a key.
func blankPageKeyFloor(bctx context.Context, n int) (stats, error) {
	c, cancel := context.WithTimeout(bctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(c, chromedp.Navigate("data:text/html,<textarea autofocus></textarea>"), chromedp.Focus(chromedp.CSS("textarea"))); err != nil {
		return stats{}, err
	}
	if _, err := chromedp.Run(c, chromedp.Evaluate[bool](afterKeyProbe)); err != nil {
		return stats{}, err
	}
	for range n {
		if err := pressKey(c, "q"); err != nil {
			return stats{}, err
		}
		time.Sleep(20 * time.Millisecond)
	}
	v, err := chromedp.Run(c, chromedp.Evaluate[[]float64](`window.__free`))
	if err != nil {
		return stats{}, err
	}
	return summarize("floor: keydown → main thread free, blank page with a text field, frame clock unthrottled", millis(v)), nil
}

func millis(v []float64) []time.Duration {
	d := make([]time.Duration, 0, len(v))
	for _, x := range v {
		d = append(d, time.Duration(x*float64(time.Millisecond)))
	}
	return d
}

func chromiumVersion() string {
	out, err := exec.Command(harness.ChromiumPath(), "--version").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

// wsShellEcho is the WebSocket echo of the same kind of session the
// dashboard opens (start_shell: the agent user's shell in tmux), without a
// browser: what the browser adds is the difference.
func wsShellEcho(srv *harness.Server, agentID, name string, n int, deadline time.Time) (stats, error) {
	c, err := dialTerm(srv)
	if err != nil {
		return stats{}, err
	}
	defer c.Close()
	if err := c.WriteJSON(map[string]any{"type": "start_shell", "agent_id": agentID, "cols": 120, "rows": 40}); err != nil {
		return stats{}, err
	}
	f, err := c.waitType("session_started", deadline)
	if err != nil {
		return stats{}, err
	}
	id := f.SessionID
	defer func() { _ = c.WriteJSON(map[string]any{"type": "kill_session", "session_id": id}) }()
	time.Sleep(500 * time.Millisecond) // the prompt
	input, readBack := c.echo(id, deadline)
	return echoLoop(name, n, input, readBack)
}
