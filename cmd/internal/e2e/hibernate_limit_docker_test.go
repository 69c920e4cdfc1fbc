package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// expectedRE reads a hibernate_limit refusal's estimate of the save it
// refused.
var expectedRE = regexp.MustCompile(`(\d+) more expected`)

// Filesystem saves on Docker (a dockerd without checkpoints) at once
// respect AGENTIC_HIBERNATE_MAX_BYTES: each reserves the container's
// writable layer, as the engine measures it, before its container is
// stopped, so that two containers of 24 MiB written under a 40 MiB limit
// hibernated at once cannot both pass a check that expected nothing of
// either. Exactly one is refused (507 hibernate_limit) and stays ready;
// the other saves; the refusal's estimate is what a save of the same
// files takes; the refused one fits once the saved one is deleted, and
// saves what its refusal expected.
func TestDockerFilesystemSavesAtOnceStayWithinTheLimit(t *testing.T) {
	const written, limit = 24 << 20, 40 << 20
	host := privateDockerd(t)
	s := startServer(t, 0, t.TempDir(), "DOCKER_HOST="+host, "AGENTIC_RUNTIMES=docker",
		"AGENTIC_HIBERNATE_MAX_BYTES="+strconv.Itoa(limit))
	suffix := time.Now().UnixNano() % 100000
	names := []string{fmt.Sprintf("fsres-a-%d", suffix), fmt.Sprintf("fsres-b-%d", suffix)}
	for _, n := range names {
		if e := createReady(t, s, "docker", n, ""); e.Hibernate != "filesystem" {
			t.Fatalf("%s says hibernate %q, want filesystem (a dockerd without --experimental)", n, e.Hibernate)
		}
		execOut(t, s, n, fmt.Sprintf("dd if=/dev/zero of=/tmp/blob bs=1048576 count=%d 2>/dev/null", written>>20))
	}

	type result struct {
		name   string
		status int
		env    envJSON
		body   []byte
		err    error
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	results := make(chan result, len(names))
	for _, n := range names {
		go func() {
			r, err := s.Client().HibernateEnvironmentWithResponse(ctx, n)
			if err != nil {
				results <- result{name: n, err: err}
				return
			}
			var e envJSON
			_ = json.Unmarshal(r.Body, &e)
			results <- result{n, r.StatusCode(), e, r.Body, nil}
		}()
	}
	var saved, refused result
	for range names {
		r := testkit.Receive(t, patience, results, "a hibernation")
		if r.err != nil {
			t.Fatalf("hibernate %s: %v", r.name, r.err)
		}
		switch r.status {
		case 200:
			saved = r
		case 507:
			refused = r
		default:
			t.Fatalf("hibernate %s: %d %s", r.name, r.status, r.body)
		}
	}
	if saved.name == "" || refused.name == "" {
		t.Fatalf("two filesystem saves of %d MiB at once under a %d MiB limit: saved %q, refused %q; want exactly one refused (507)",
			written>>20, limit>>20, saved.name, refused.name)
	}
	if saved.env.State != "hibernated" || saved.env.SavedBytes < written {
		t.Fatalf("the one saved: %s", saved.body)
	}
	var apiErr struct{ Code, Error string }
	if err := json.Unmarshal(refused.body, &apiErr); err != nil || apiErr.Code != "hibernate_limit" {
		t.Fatalf("the refusal: %s", refused.body)
	}
	m := expectedRE.FindStringSubmatch(apiErr.Error)
	if m == nil {
		t.Fatalf("the refusal names no estimate: %s", apiErr.Error)
	}
	// Its estimate is the writable layer, the measure of saved_bytes: the
	// same files in the other container saved about as much.
	estimate, _ := strconv.ParseInt(m[1], 10, 64)
	if estimate < written || estimate > saved.env.SavedBytes+1<<20 || estimate < saved.env.SavedBytes-1<<20 {
		t.Fatalf("the refused save expected %d bytes; %d were written, and the same files saved %d bytes", estimate, written, saved.env.SavedBytes)
	}
	t.Logf("%s saved %d bytes; %s refused, expecting %d: %s", saved.name, saved.env.SavedBytes, refused.name, estimate, apiErr.Error)
	if _, e, b := envCall(t, s, "GET", refused.name, "", ""); e.State != "ready" || e.SavedBytes != 0 {
		t.Fatalf("the refused one: %s", b)
	}
	execOut(t, s, refused.name, "test -s /tmp/blob")

	// The saved one still leaves no room for it; deleted, it does.
	if st, _, b := envCall(t, s, "POST", refused.name, "/hibernate", ""); st != 507 {
		t.Fatalf("%d MiB more with %d bytes saved under %d MiB: %d %s", written>>20, saved.env.SavedBytes, limit>>20, st, b)
	}
	if _, errOut, code := ctl(t, s.RESTURL, s.Token, "env", "rm", saved.name); code != 0 {
		t.Fatalf("env rm %s: %d %s", saved.name, code, errOut)
	}
	if !testkit.Within(patience, func() bool {
		st, _, _ := envCall(t, s, "GET", saved.name, "", "")
		return st == 404
	}) {
		t.Fatalf("%s was not deleted", saved.name)
	}
	e := hibernated(t, s, refused.name)
	if e.SavedBytes < estimate-1<<20 || e.SavedBytes > estimate+1<<20 {
		t.Fatalf("saved %d bytes where its refusal expected %d", e.SavedBytes, estimate)
	}
	t.Logf("%s saved %d bytes once the other was deleted", refused.name, e.SavedBytes)
}
