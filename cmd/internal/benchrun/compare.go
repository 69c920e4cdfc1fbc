package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// compareExec is `benchrun -bin AFTER -before BEFORE`: the REST exec
// round trip for `true` of two builds, each its own agentic-mgmt with a
// host agent, running side by side and measured in alternating rounds
// (the order rotated each round), so that both see the same machine: the
// operator token on both, and a named token of role operator on the
// after build (made with POST /api/v1/tokens). Each round measures batch calls
// of each; the result is each variant's percentiles over every call and
// the median of the per-round ratios of medians to the first variant
// (pairs taken within a round, so a slow minute of the machine moves
// both).
func compareExec(after, before harness.Binaries, rounds, batch int) error {
	type variant struct {
		name   string
		url    string
		token  string
		all    []time.Duration
		rounds []time.Duration // the median of each round
	}
	var vs []*variant
	for _, b := range []struct {
		name string
		bins harness.Binaries
	}{{"before", before}, {"after", after}} {
		srv, stop, err := hostServer(b.bins, "compare-"+b.name, nil, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		defer stop()
		vs = append(vs, &variant{name: b.name + ", operator token", url: srv.RESTURL, token: srv.Token})
		if b.name == "after" {
			tok, err := namedToken(srv.RESTURL, srv.Token)
			if err != nil {
				return fmt.Errorf("a named token on the after build: %w", err)
			}
			vs = append(vs, &variant{name: b.name + ", named token (role operator)", url: srv.RESTURL, token: tok})
		}
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	execTrue := func(v *variant) error {
		req, _ := http.NewRequest(http.MethodPost, v.url+"/api/v1/agents/host-01/exec", strings.NewReader(`{"command":"true"}`))
		req.Header.Set("Authorization", "Bearer "+v.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: status %d: %s", v.name, resp.StatusCode, b)
		}
		return err
	}
	for _, v := range vs { // warm up connections, caches and the agents
		for range 100 {
			if err := execTrue(v); err != nil {
				return err
			}
		}
	}
	for r := range rounds {
		for i := range vs {
			v := vs[(i+r)%len(vs)]
			d := make([]time.Duration, 0, batch)
			for range batch {
				start := time.Now()
				if err := execTrue(v); err != nil {
					return err
				}
				d = append(d, time.Since(start))
			}
			v.all = append(v.all, d...)
			slices.Sort(d)
			v.rounds = append(v.rounds, d[len(d)/2])
		}
	}

	fmt.Printf("# agentic-sandbox exec before/after, %s, %d cores, %s\n\n", time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), runtime.Version())
	fmt.Printf("REST exec `true` via host agent, %d rounds of %d calls each, interleaved (before: %s, after: %s)\n\n",
		rounds, batch, filepath.Dir(before.Mgmt), filepath.Dir(after.Mgmt))
	fmt.Println("| build, token | n | p50 | p99 | mean | median of round ratios to before |")
	fmt.Println("| --- | --- | --- | --- | --- | --- |")
	for _, v := range vs {
		slices.Sort(v.all)
		var sum time.Duration
		for _, x := range v.all {
			sum += x
		}
		ratios := make([]float64, len(v.rounds))
		for i := range v.rounds {
			ratios[i] = float64(v.rounds[i]) / float64(vs[0].rounds[i])
		}
		slices.Sort(ratios)
		n := len(v.all)
		fmt.Printf("| %s | %d | %s | %s | %s | %.3f (%.3f–%.3f) |\n", v.name, n, ms(v.all[n/2]), ms(v.all[n*99/100]), ms(sum/time.Duration(n)),
			ratios[len(ratios)/2], ratios[len(ratios)/10], ratios[len(ratios)*9/10])
	}
	fmt.Println("\n(the ratio's range: the 10th and 90th percentile of the rounds)")
	return nil
}

// namedToken creates a named token of role operator through the REST API.
func namedToken(url, operatorToken string) (string, error) {
	body := fmt.Sprintf(`{"name":"bench-%d","role":"operator"}`, time.Now().UnixNano())
	req, _ := http.NewRequest(http.MethodPost, url+"/api/v1/tokens", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("POST /api/v1/tokens: %d %s", resp.StatusCode, b)
	}
	var t struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(b, &t); err != nil || t.Token == "" {
		return "", fmt.Errorf("POST /api/v1/tokens: no token in %s", b)
	}
	return t.Token, nil
}
