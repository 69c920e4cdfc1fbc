package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
	"github.com/agentic-sandbox/agentic-sandbox/internal/testreq"
)

// browser is a headless Chromium from Debian driven by chromedp; each
// page is a tab in a browser context of its own (its own cookies).
type browser struct {
	t   *testing.T
	ctx context.Context
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := harness.ChromiumPath()
	testreq.Need(t, path != "", "headless Chromium", "apt-get install -y chromium (make deps installs it)")
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), harness.ChromiumOptions(path, t.TempDir())...)
	ctx, cancel := chromedp.NewContext(alloc)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		cancel()
		cancelAlloc()
		t.Fatalf("starting chromium: %v", err)
	}
	t.Cleanup(func() { cancel(); cancelAlloc() })
	return &browser{t: t, ctx: ctx}
}

// page is one tab.
type page struct {
	t   *testing.T
	ctx context.Context
	// shots is where screenshots go (the test's artifact directory).
	shots string
}

// newPage opens a tab in a browser context of its own.
func (b *browser) newPage() *page {
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	b.t.Cleanup(cancel)
	// The tab is made by the first run, on a context with no timeout: it
	// lives as long as that context.
	if err := chromedp.Do(ctx); err != nil {
		b.t.Fatalf("a new tab: %v", err)
	}
	p := &page{t: b.t, ctx: ctx, shots: b.t.ArtifactDir()}
	// The page's exceptions and console errors go to the test log.
	_ = chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg := e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
			p.t.Logf("page exception: %s", msg)
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				p.t.Logf("page console %s: %s", e.Type, strings.Join(parts, " "))
			}
		}
	})
	return p
}

func testid(id string) chromedp.CSS { return chromedp.CSS(`[data-testid="` + id + `"]`) }

// do runs steps, each bounded so that a missing element fails the test
// instead of hanging it.
func (p *page) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		p.t.Fatalf("%s: %v", what, err)
	}
}

func (p *page) eval(js string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	if err != nil {
		p.t.Fatalf("evaluating %q: %v", js, err)
	}
	return v
}

// evalAsync evaluates an expression that yields a promise of a string.
func (p *page) evalAsync(js string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("evaluating %q: %v", js, err)
	}
	return v
}

// waitJS waits until the expression is true.
func (p *page) waitJS(what, js string) {
	p.t.Helper()
	if !p.poll(js, patience) {
		p.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		p.t.Fatalf("waiting for %s (%s)", what, js)
	}
}

// typeUntil types keys, again every few seconds, until the expression is
// true.
func (p *page) typeUntil(what, keys, js string) {
	p.t.Helper()
	for deadline := time.Now().Add(patience); ; {
		p.typeKeys(keys)
		if p.poll(js, 3*time.Second) {
			return
		}
		if time.Now().After(deadline) {
			p.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
			p.t.Fatalf("waiting for %s after typing %q (%s)", what, keys, js)
		}
	}
}

// poll reports whether the expression turns true within d.
func (p *page) poll(js string, d time.Duration) bool {
	p.t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		if p.eval("String(Boolean("+js+"))") == "true" {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// shot saves a screenshot of the whole page.
func (p *page) shot(name string) {
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(p.shots, name+".png")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
	}
}

// typeKeys types text as keystrokes: a keyDown carrying the text and a
// keyUp for each character (chromedp.SendKeys makes xterm.js see each key
// twice).
func (p *page) typeKeys(text string) {
	p.t.Helper()
	p.do("typing", chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, r := range text {
			down := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyDown, Text: string(r), Key: string(r)}
			if r == '\r' {
				down.Key, down.Code, down.WindowsVirtualKeyCode = "Enter", "Enter", 13
			}
			if _, err := chromedp.Call(ctx, input.DispatchKeyEvent, down); err != nil {
				return err
			}
			up := down
			up.Type, up.Text = input.DispatchKeyEventTypeKeyUp, ""
			if _, err := chromedp.Call(ctx, input.DispatchKeyEvent, up); err != nil {
				return err
			}
		}
		return nil
	}))
}

// termRows is the text of the terminal's rows (xterm's DOM renderer).
func (p *page) termRows() string {
	return p.eval(`(document.querySelector('[data-testid="terminal"] .xterm-rows') || {innerText: ""}).innerText`)
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
