package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// filesBench moves 64 MiB and 1 GiB files through REST to a host agent and
// back, beside a local cp (the floor) and scp to a throwaway local sshd, and
// samples the peak RSS of agentic-mgmt and of the agent (with its file
// helper) during each transfer.
func filesBench(bins harness.Binaries) error {
	srv, stop, err := hostServer(bins, "files", nil, nil)
	if err != nil {
		return err
	}
	defer stop()
	agentPID := harness.HostAgentPIDs(srv.DataDir)["host-01"]
	sshd, sshErr := startSSHDWithSCP()
	if sshErr == nil {
		defer sshd.stop()
	}
	work := filepath.Join(srv.DataDir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		return err
	}

	fmt.Printf("\n## File transfer through REST → agent (host agent, loopback)\n\n")
	fmt.Println("| size | path | MiB/s | time | peak RSS agentic-mgmt | peak RSS agent + helper |")
	fmt.Println("| --- | --- | --- | --- | --- | --- |")
	for _, size := range []int64{64 << 20, 1 << 30} {
		src := filepath.Join(work, "src")
		if err := randomFile(src, size); err != nil {
			return err
		}
		row := func(path string, d time.Duration, mgmt, agent int64) {
			rss := func(k int64) string {
				if k == 0 {
					return "-"
				}
				return fmt.Sprintf("%.1f MiB", float64(k)/1024)
			}
			fmt.Printf("| %d MiB | %s | %.0f | %s | %s | %s |\n", size>>20, path, float64(size)/(1<<20)/d.Seconds(), d.Round(time.Millisecond), rss(mgmt), rss(agent))
		}
		dst := filepath.Join(work, "dst")
		d, err := timed(func() error { return exec.Command("cp", src, dst).Run() })
		if err != nil {
			return fmt.Errorf("cp: %w", err)
		}
		row("local `cp` (floor)", d, 0, 0)
		var scpUp, scpDown time.Duration
		_ = os.Remove(dst)
		if sshErr == nil {
			d, err = timed(func() error { return quiet(sshd.scp(src, "127.0.0.1:"+dst)) })
			if err != nil {
				return fmt.Errorf("scp up: %w", err)
			}
			row("`scp` up (local sshd)", d, 0, 0)
			scpUp = d
			back := filepath.Join(work, "back")
			d, err = timed(func() error { return quiet(sshd.scp("127.0.0.1:"+dst, back)) })
			if err != nil {
				return fmt.Errorf("scp down: %w", err)
			}
			row("`scp` down (local sshd)", d, 0, 0)
			scpDown = d
			_ = os.Remove(dst)
			_ = os.Remove(back)
		}
		var mgmtPeak, agentPeak int64
		sample := peakRSS(srv.Cmd.Process.Pid, agentPID, &mgmtPeak, &agentPeak)
		d, err = timed(func() error { return restUpload(srv, src, dst, size) })
		sample()
		if err != nil {
			return fmt.Errorf("REST upload: %w", err)
		}
		row("REST PUT files/content → agent", d, mgmtPeak, agentPeak)
		notePaths(size, "files-up", d, scpUp)
		back := filepath.Join(work, "back")
		mgmtPeak, agentPeak = 0, 0
		sample = peakRSS(srv.Cmd.Process.Pid, agentPID, &mgmtPeak, &agentPeak)
		d, err = timed(func() error { return restDownload(srv, dst, back, size) })
		sample()
		if err != nil {
			return fmt.Errorf("REST download: %w", err)
		}
		row("REST GET files/content ← agent", d, mgmtPeak, agentPeak)
		notePaths(size, "files-down", d, scpDown)
		for _, p := range []string{src, dst, back} {
			_ = os.Remove(p)
		}
	}
	if sshErr != nil {
		fmt.Println("\nscp baseline skipped:", sshErr)
	}
	return nil
}

// notePaths notes a 1 GiB transfer that took d beside scp's (0: none).
func notePaths(size int64, key string, d, scp time.Duration) {
	if size != 1<<30 || scp == 0 {
		return
	}
	mibs := func(d time.Duration) string { return fmt.Sprintf("%.0f MiB/s", float64(size)/(1<<20)/d.Seconds()) }
	notePath(key, mibs(d), mibs(scp), float64(scp)/float64(d))
}

func timed(f func() error) (time.Duration, error) {
	start := time.Now()
	err := f()
	return time.Since(start), err
}

func quiet(c *exec.Cmd) error {
	out, err := c.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// randomFile writes size bytes that do not compress.
func randomFile(p string, size int64) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	rng := rand.NewChaCha8([32]byte{1, 2, 3})
	if _, err := io.CopyN(f, rng, size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fileCall sends one request to the files route of host-01's path p and
// returns the answer when its status is want (the caller closes its body).
func fileCall(srv *harness.Server, method, p string, body io.Reader, size int64, want int) (*http.Response, error) {
	req, _ := http.NewRequest(method, srv.RESTURL+"/api/v1/agents/host-01/files/content?path="+url.QueryEscape(p), body)
	req.ContentLength = size
	req.Header.Set("Authorization", "Bearer "+srv.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != want {
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return resp, nil
}

func restUpload(srv *harness.Server, src, dst string, size int64) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	resp, err := fileCall(srv, http.MethodPut, dst, f, size, http.StatusNoContent)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

func restDownload(srv *harness.Server, src, dst string, size int64) error {
	resp, err := fileCall(srv, http.MethodGet, src, nil, 0, http.StatusOK)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = errors.New("short download: " + strconv.FormatInt(n, 10))
	}
	return err
}

// peakRSS samples the RSS of mgmt and of agent with its children every
// 20 ms until the returned stop is called; peaks go to the pointers.
func peakRSS(mgmt, agent int, mgmtPeak, agentPeak *int64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if k, err := rssKiB(mgmt); err == nil && k > *mgmtPeak {
				*mgmtPeak = k
			}
			total := int64(0)
			for _, pid := range append([]int{agent}, childrenOf(agent)...) {
				if k, err := rssKiB(pid); err == nil {
					total += k
				}
			}
			if total > *agentPeak {
				*agentPeak = total
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func childrenOf(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}
