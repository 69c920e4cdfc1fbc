package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// The host runtime offers no isolation tier and has no scheduler: through
// the real server, REST and the CLI alike, a create (or a pool) asking for
// gvisor or a placement is 400 invalid_request saying what the runtime
// offers, and nothing is made; GET /api/v1/runtimes says so up front.
func TestIsolationAndPlacementRefusedOnTheHostRuntime(t *testing.T) {
	s := startServer(t, 0, "")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	c := s.Client()

	rts, err := c.ListRuntimesWithResponse(ctx)
	if err != nil || rts.JSON200 == nil {
		t.Fatalf("runtimes: %v %s", err, rts.Body)
	}
	var host *restapi.Runtime
	for i, r := range rts.JSON200.Runtimes {
		if r.Runtime == "host" {
			host = &rts.JSON200.Runtimes[i]
		}
	}
	if host == nil || host.Tiers == nil || len(host.Tiers) != 0 || host.Placement {
		t.Fatalf("the host runtime lists %+v, want no tiers ([]) and no placement", host)
	}

	const noTier = `isolation "gvisor": the host runtime offers no tier but its standard one`
	gvisor := "gvisor"
	resp, err := c.CreateEnvironmentWithResponse(ctx, restapi.CreateEnvironmentRequest{Runtime: "host", Name: "iso-1", Isolation: &gvisor})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != http.StatusBadRequest || resp.JSON400 == nil || resp.JSON400.Code != "invalid_request" ||
		!strings.Contains(resp.JSON400.Error, `environment "iso-1"`) || !strings.Contains(resp.JSON400.Error, noTier) {
		t.Fatalf("isolation gvisor on host: %d %s, want 400 invalid_request saying %q", resp.StatusCode(), resp.Body, noTier)
	}
	sel := map[string]string{"pool": "gpu"}
	resp, err = c.CreateEnvironmentWithResponse(ctx, restapi.CreateEnvironmentRequest{Runtime: "host", Name: "iso-1",
		Placement: &restapi.Placement{NodeSelector: &sel}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != http.StatusBadRequest || resp.JSON400 == nil || resp.JSON400.Code != "invalid_request" ||
		!strings.Contains(resp.JSON400.Error, "placement: the host runtime has no scheduler") {
		t.Fatalf("a placement on host: %d %s", resp.StatusCode(), resp.Body)
	}
	pool, err := c.PutPoolWithResponse(ctx, "iso-pool", restapi.PoolRequest{Runtime: "host", Size: 1, Spec: &restapi.PoolSpec{Isolation: &gvisor}})
	if err != nil {
		t.Fatal(err)
	}
	if pool.StatusCode() != http.StatusBadRequest || pool.JSON400 == nil || !strings.Contains(pool.JSON400.Error, noTier) {
		t.Fatalf("a gvisor pool on host: %d %s", pool.StatusCode(), pool.Body)
	}

	// The CLI's flags reach the same refusals; a malformed flag is its own.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--isolation", "gvisor"}, noTier},
		{[]string{"--node-selector", "pool=gpu"}, "no scheduler"},
		{[]string{"--toleration", "gpu=yes:NoSchedule"}, "no scheduler"},
		{[]string{"--toleration", "gpu=yes:Evict"}, `effect "Evict"`},
		{[]string{"--node-selector", "pool"}, "want KEY=VALUE"},
	} {
		args := append(append([]string{"env", "create", "--runtime", "host"}, tc.args...), "iso-1")
		out, errOut, code := ctl(t, s.RESTURL, s.Token, args...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("agenticctl %s: exit %d\nstdout %q\nstderr %q\nwant it to say %q", strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
	out, errOut, code := ctl(t, s.RESTURL, s.Token, "pool", "put", "--runtime", "host", "--size", "1", "--isolation", "gvisor", "iso-pool")
	if code == 0 || !strings.Contains(errOut, noTier) {
		t.Errorf("agenticctl pool put --isolation gvisor: exit %d %q %q", code, out, errOut)
	}

	// Nothing was made.
	if got, err := c.GetEnvironmentWithResponse(ctx, "iso-1"); err != nil || got.StatusCode() != http.StatusNotFound {
		t.Fatalf("after the refusals: %v %d %s", err, got.StatusCode(), got.Body)
	}
	if got, err := c.GetPoolWithResponse(ctx, "iso-pool"); err != nil || got.StatusCode() != http.StatusNotFound {
		t.Fatalf("after the refusals, the pool: %v %d %s", err, got.StatusCode(), got.Body)
	}
}
