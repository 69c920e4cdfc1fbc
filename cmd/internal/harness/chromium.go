package harness

import (
	"os"
	"os/exec"

	"github.com/chromedp/chromedp"
)

// ChromiumPath is Debian's Chromium, or "" when it is not installed.
func ChromiumPath() string {
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, _ := exec.LookPath("chromium")
	return p
}

// ChromiumOptions are the allocator options of the browser tests and the
// dashboard bench: headless, no sandbox (root), nothing fetched from the
// network, a profile of its own in userDataDir, a 1280×800 window.
func ChromiumOptions(path, userDataDir string) []chromedp.ExecAllocatorOption {
	return []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true), chromedp.Flag("no-first-run", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true), chromedp.UserDataDir(userDataDir),
		chromedp.WindowSize(1280, 800),
	}
}
