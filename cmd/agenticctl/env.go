package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

const envUsage = `Usage:
  agenticctl env create --runtime R [--label k=v]… [flags] NAME
                         provision an environment and its agent (id NAME), showing
                         progress until the agent is ready (--no-wait: return at once);
                         a token with a label scope adds its labels;
                         --idle-after D hibernates it once unused for D (runtimes that
                         can hibernate), --delete-after D deletes it once hibernated or
                         stopped for D (D: 90s, 30m, 1h30m)
  agenticctl env list [--json]
  agenticctl env get NAME
  agenticctl env stop NAME
  agenticctl env start NAME
  agenticctl env pause NAME
                         freeze its processes, keeping their memory (runtimes with pause)
  agenticctl env resume NAME
  agenticctl env hibernate NAME
                         save it to disk and free its memory and CPU (runtimes whose
                         hibernate is memory or filesystem); returns once saved
  agenticctl env wake NAME
                         run a hibernated environment again; returns once its agent is
                         back (work aimed at it, an exec or a file call, wakes it too)
  agenticctl env rm NAME
  agenticctl env runtimes
                         the runtimes the server offers, with their capabilities

Exit status: create exits 0 once the agent is ready, 1 if the environment failed.
`

func (c *cli) environments(args []string) int {
	one := func(op string) func([]string) int {
		return func(args []string) int { return c.envOne(op, args) }
	}
	return c.group("env", envUsage, args,
		verb{[]string{"create", "new"}, c.envCreate},
		verb{[]string{"list", "ls"}, c.envList},
		verb{[]string{"get", "show"}, one("get")},
		verb{[]string{"stop"}, one("stop")},
		verb{[]string{"start"}, one("start")},
		verb{[]string{"pause"}, one("pause")},
		verb{[]string{"resume"}, one("resume")},
		verb{[]string{"hibernate", "sleep"}, c.envHibernate},
		verb{[]string{"wake"}, c.envWake},
		verb{[]string{"rm", "delete"}, one("rm")},
		verb{[]string{"runtimes"}, c.envRuntimes})
}

func (c *cli) envCreate(args []string) int {
	flags := c.flagSet("agenticctl env create")
	runtime := flags.String("runtime", "", "runtime `R`, one of those the server offers ('agenticctl env runtimes')")
	spec := specFlags(flags)
	var labels multiFlag
	flags.Var(&labels, "label", "a label `k=v` of the environment (repeatable)")
	idle := idleFlags(flags, "it")
	noWait := flags.Bool("no-wait", false, "return once provisioning started")
	timeout := flags.Duration("timeout", 5*time.Minute, "how long to wait for the agent")
	if code, done := parseFlags(flags, args, c.stdout, c.stderr, envUsage); done {
		return code
	}
	if flags.NArg() != 1 || *runtime == "" {
		return c.fail("env create takes --runtime and one NAME; run 'agenticctl env --help'")
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	sp, err := spec.spec()
	if err != nil {
		return c.fail("env create: %v", err)
	}
	body := restapi.CreateEnvironmentRequest{Name: flags.Arg(0), Runtime: *runtime, Image: sp.Image, Network: sp.Network,
		Profile: sp.Profile, ReadOnlyRoot: sp.ReadOnlyRoot, Resources: sp.Resources, Isolation: sp.Isolation, Placement: sp.Placement}
	body.IdleAfter, body.DeleteAfter = idle.values()
	if len(labels) > 0 {
		m := map[string]string{}
		for _, kv := range labels {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return c.fail("--label %q: write it as KEY=VALUE", kv)
			}
			m[k] = v
		}
		body.Labels = &m
	}
	ctx := context.Background()
	resp, err := cl.CreateEnvironmentWithResponse(ctx, body)
	if err != nil || resp.JSON202 == nil {
		return c.failed(server, err, resp)
	}
	env := *resp.JSON202
	shown := c.showEvents(env, 0)
	if *noWait {
		fmt.Fprintf(c.stdout, "%s: %s\n", clean(env.Name), env.State)
		return 0
	}
	deadline := time.Now().Add(*timeout)
	for {
		switch env.State {
		case restapi.EnvReady:
			ms := int64(0)
			if env.ProvisionMs != nil {
				ms = *env.ProvisionMs
			}
			fmt.Fprintf(c.stdout, "%s: ready (agent %s connected after %.1fs)\n", clean(env.Name), clean(env.AgentId), float64(ms)/1000)
			return 0
		case restapi.EnvFailed:
			msg := ""
			if env.Error != nil {
				msg = *env.Error
			}
			return c.fail("%s failed: %s", clean(env.Name), clean(msg))
		}
		if time.Now().After(deadline) {
			return c.fail("%s is still %s after %s ('agenticctl env get %s' shows it)", clean(env.Name), env.State, *timeout, clean(env.Name))
		}
		time.Sleep(200 * time.Millisecond)
		got, err := cl.GetEnvironmentWithResponse(ctx, env.Name)
		if err != nil || got.JSON200 == nil {
			return c.failed(server, err, got)
		}
		env = *got.JSON200
		shown = c.showEvents(env, shown)
	}
}

// showEvents prints the events after the first shown ones, with the time
// since the request; it returns how many are shown.
func (c *cli) showEvents(env restapi.Environment, shown int) int {
	for _, ev := range env.Events[min(shown, len(env.Events)):] {
		msg := ""
		if ev.Message != nil {
			msg = " — " + clean(*ev.Message)
		}
		fmt.Fprintf(c.stderr, "  %6.1fs  %s%s\n", ev.At.Sub(env.CreatedAt).Seconds(), clean(ev.Step), msg)
	}
	return len(env.Events)
}

func (c *cli) envList(args []string) int {
	flags := c.flagSet("agenticctl env list")
	asJSON := flags.Bool("json", false, "print the list as JSON")
	if code, done := parseFlags(flags, args, c.stdout, c.stderr, envUsage); done {
		return code
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	resp, err := cl.ListEnvironmentsWithResponse(context.Background(), nil)
	if err != nil || resp.JSON200 == nil {
		return c.failed(server, err, resp)
	}
	return c.list(*asJSON, resp.Body, "NAME\tRUNTIME\tSTATE\tAGENT\tPROVISION\tIMAGE", func(w io.Writer) {
		for _, e := range resp.JSON200.Environments {
			prov, agent, image := "-", "-", "-"
			if e.ProvisionMs != nil {
				prov = fmt.Sprintf("%.2fs", float64(*e.ProvisionMs)/1000)
			}
			if e.AgentStatus != nil {
				agent = *e.AgentStatus
			}
			if e.Image != nil {
				image = *e.Image
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(e.Name), cell(runtimeAndTier(e.Runtime, e.Isolation)), cell(stateOf(e)), cell(agent), prov, cell(image))
		}
	})
}

// envOps are the verbs that change one environment, by name: the call, the
// status it answers with, and what is said then (of the name).
var envOps = map[string]struct {
	call idCall
	want int
	said string
}{
	"stop":   {restapi.ClientInterface.StopEnvironment, http.StatusOK, "%s: stopped\n"},
	"start":  {restapi.ClientInterface.StartEnvironment, http.StatusOK, "%s: starting\n"},
	"pause":  {restapi.ClientInterface.PauseEnvironment, http.StatusOK, "%s: paused\n"},
	"resume": {restapi.ClientInterface.ResumeEnvironment, http.StatusOK, "%s: resumed\n"},
	"rm":     {restapi.ClientInterface.DeleteEnvironment, http.StatusNoContent, "%s deleted\n"},
}

func (c *cli) envOne(op string, args []string) int {
	wrong := fmt.Sprintf("env %s takes exactly one environment name; 'agenticctl env list' shows them", op)
	o, changes := envOps[op]
	if !changes {
		return c.showByID("env "+op, envUsage, wrong, args, restapi.ClientInterface.GetEnvironment)
	}
	return c.changeByID("env "+op, envUsage, wrong, args, o.call, o.want, o.said)
}

func (c *cli) envRuntimes(args []string) int {
	flags := c.flagSet("agenticctl env runtimes")
	if code, done := parseFlags(flags, args, c.stdout, c.stderr, envUsage); done {
		return code
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	resp, err := cl.ListRuntimesWithResponse(context.Background())
	if err != nil || resp.JSON200 == nil {
		return c.failed(server, err, resp)
	}
	code := c.table("RUNTIME\tISOLATION\tNETWORKS\tLIMITS\tOPTIONS", func(w io.Writer) {
		for _, r := range resp.JSON200.Runtimes {
			var opts []string
			for _, o := range []struct {
				on   bool
				name string
			}{{r.Pause, "pause"}, {r.ReadOnlyRoot, "read-only-root"}, {r.Images, "images"}, {r.Placement, "placement"}} {
				if o.on {
					opts = append(opts, o.name)
				}
			}
			if r.Hibernate != "" && r.Hibernate != restapi.HibernateNone {
				opts = append(opts, "hibernate="+string(r.Hibernate))
			}
			for _, tier := range r.Tiers {
				opts = append(opts, "isolation="+tier)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", cell(r.Runtime), r.Isolation, cell(strings.Join(r.NetworkModes, ",")),
				cell(strings.Join(r.Limits, ",")), cell(strings.Join(opts, ",")))
		}
	})
	if code != 0 || resp.JSON200.Unavailable == nil {
		return code
	}
	// What is not offered, and how to get it, after the table.
	fmt.Fprintln(c.stdout)
	for _, u := range *resp.JSON200.Unavailable {
		fmt.Fprintf(c.stdout, "not offered: %s: %s\n", cell(u.Runtime), cell(u.Reason))
	}
	return 0
}

// stateOf is an environment's state as listed: a hibernated one's with
// what its saved state takes and why it sleeps.
func stateOf(e restapi.Environment) string {
	if e.State != restapi.EnvHibernated {
		return string(e.State)
	}
	var why []string
	if e.SavedBytes != nil {
		why = append(why, mib(*e.SavedBytes))
	}
	if e.SleepReason != nil {
		why = append(why, *e.SleepReason)
	}
	if len(why) == 0 {
		return string(e.State)
	}
	return string(e.State) + " (" + strings.Join(why, "; ") + ")"
}

// envHibernate saves an environment and says what it took.
func (c *cli) envHibernate(args []string) int {
	wrong := "env hibernate takes exactly one environment name; 'agenticctl env list' shows them"
	return c.byID("env hibernate", envUsage, wrong, args, restapi.ClientInterface.HibernateEnvironment, http.StatusOK, func(id string, body []byte) int {
		var e restapi.Environment
		if err := json.Unmarshal(body, &e); err != nil {
			return c.fail("reading the answer: %v", err)
		}
		fmt.Fprintf(c.stdout, "%s: %s\n", clean(id), stateOf(e))
		return 0
	})
}

// envWake wakes an environment and says its state once the server answers
// (ready: its agent is back).
func (c *cli) envWake(args []string) int {
	wrong := "env wake takes exactly one environment name; 'agenticctl env list' shows them"
	return c.byID("env wake", envUsage, wrong, args, restapi.ClientInterface.WakeEnvironment, http.StatusOK, func(id string, body []byte) int {
		var e restapi.Environment
		if err := json.Unmarshal(body, &e); err != nil {
			return c.fail("reading the answer: %v", err)
		}
		fmt.Fprintf(c.stdout, "%s: %s\n", clean(id), e.State)
		return 0
	})
}

// idlePolicy are the --idle-after and --delete-after flags of env create
// and pool put.
type idlePolicy struct{ idleAfter, deleteAfter *time.Duration }

func idleFlags(flags *flag.FlagSet, of string) idlePolicy {
	return idlePolicy{
		idleAfter:   flags.Duration("idle-after", 0, "hibernate "+of+" once nothing used it for `D` (e.g. 30m; runtimes that can hibernate; 0: never)"),
		deleteAfter: flags.Duration("delete-after", 0, "delete "+of+" once hibernated or stopped for `D` (e.g. 24h; 0: never)"),
	}
}

// values are the flags as the API's durations: unset (0) ones absent; a
// negative one is sent as it is, for the server to refuse.
func (p idlePolicy) values() (idleAfter, deleteAfter *string) {
	opt := func(d time.Duration) *string {
		if d == 0 {
			return nil
		}
		s := d.String()
		return &s
	}
	return opt(*p.idleAfter), opt(*p.deleteAfter)
}

// envSpec are the flags that say what an environment is made of, for env
// create and pool put alike.
type envSpec struct {
	image, network, profile, isolation *string
	cpus                               *float64
	memory, pids, disk                 *int
	readOnly                           *bool
	nodeSelector, tolerations          *multiFlag
}

// runtimeAndTier is an environment's runtime as listed: with its isolation
// tier after a colon when it has one (docker:gvisor).
func runtimeAndTier(runtime string, tier *string) string {
	if tier == nil || *tier == "" {
		return runtime
	}
	return runtime + ":" + *tier
}

func specFlags(flags *flag.FlagSet) envSpec {
	f := envSpec{
		image:    flags.String("image", "", "container `IMAGE` or VM disk image path (default: the runtime's own)"),
		network:  flags.String("network", "", "network `MODE` (default: the runtime's first, none where offered)"),
		profile:  flags.String("profile", "", "the runtime's `PROFILE` ('agenticctl env runtimes' lists each runtime's)"),
		cpus:     flags.Float64("cpus", 0, "CPU limit"),
		memory:   flags.Int("memory", 0, "memory limit in `MB`"),
		pids:     flags.Int("pids", 0, "process limit"),
		disk:     flags.Int("disk", 0, "disk size in `GB` (where the runtime's limits include disk_gb)"),
		readOnly: flags.Bool("read-only", false, "read-only root filesystem"),
		isolation: flags.String("isolation", "", "a `TIER` stronger than the runtime's standard sandbox, among its tiers "+
			"('agenticctl env runtimes' lists them as isolation=TIER), e.g. gvisor"),
		nodeSelector: new(multiFlag),
		tolerations:  new(multiFlag),
	}
	flags.Var(f.nodeSelector, "node-selector", "`KEY=VALUE`: only on nodes with this label (runtimes with placement; repeatable)")
	flags.Var(f.tolerations, "toleration", "`KEY=VALUE:EFFECT` tolerates that taint (operator Equal); KEY:EFFECT or KEY any value of it "+
		"(Exists); '*' every taint; EFFECT NoSchedule, PreferNoSchedule or NoExecute, or none for all (runtimes with placement; repeatable)")
	return f
}

// placement is the node selector and tolerations flags as the API's
// placement (nil when none is given).
func (f envSpec) placement() (*restapi.Placement, error) {
	if len(*f.nodeSelector) == 0 && len(*f.tolerations) == 0 {
		return nil, nil
	}
	p := &restapi.Placement{}
	if len(*f.nodeSelector) > 0 {
		sel := map[string]string{}
		for _, kv := range *f.nodeSelector {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("--node-selector %q: want KEY=VALUE", kv)
			}
			sel[k] = v
		}
		p.NodeSelector = &sel
	}
	if len(*f.tolerations) > 0 {
		list := []restapi.Toleration{}
		for _, s := range *f.tolerations {
			t, err := parseToleration(s)
			if err != nil {
				return nil, err
			}
			list = append(list, t)
		}
		p.Tolerations = &list
	}
	return p, nil
}

// parseToleration reads KEY=VALUE[:EFFECT] (Equal), KEY[:EFFECT] (Exists)
// or *[:EFFECT] (Exists, every key), as kubectl writes taints.
func parseToleration(s string) (restapi.Toleration, error) {
	var t restapi.Toleration
	rest, effect, hasEffect := strings.Cut(s, ":")
	if hasEffect {
		e := restapi.TolerationEffect(effect)
		if !e.Valid() {
			return t, fmt.Errorf("--toleration %q: effect %q: want NoSchedule, PreferNoSchedule or NoExecute", s, effect)
		}
		t.Effect = &e
	}
	key, value, equal := strings.Cut(rest, "=")
	switch {
	case key == "":
		return t, fmt.Errorf("--toleration %q: want KEY=VALUE:EFFECT, KEY:EFFECT or '*'", s)
	case equal:
		op := restapi.TolerationEqual
		t.Key, t.Value, t.Operator = &key, &value, &op
	default:
		op := restapi.TolerationExists
		t.Operator = &op
		if key != "*" {
			t.Key = &key
		}
	}
	return t, nil
}

// spec is the flags as the API's spec: unset ones absent.
func (f envSpec) spec() (restapi.PoolSpec, error) {
	var sp restapi.PoolSpec
	placement, err := f.placement()
	if err != nil {
		return sp, err
	}
	sp.Placement = placement
	opt := func(v *string) *string {
		if *v == "" {
			return nil
		}
		return v
	}
	sp.Image, sp.Network, sp.Profile, sp.Isolation = opt(f.image), opt(f.network), opt(f.profile), opt(f.isolation)
	if *f.readOnly {
		sp.ReadOnlyRoot = f.readOnly
	}
	if *f.cpus != 0 || *f.memory != 0 || *f.pids != 0 || *f.disk != 0 {
		res := restapi.Resources{}
		if *f.cpus != 0 {
			v := float32(*f.cpus)
			res.Cpus = &v
		}
		if *f.memory != 0 {
			res.MemoryMb = f.memory
		}
		if *f.pids != 0 {
			res.Pids = f.pids
		}
		if *f.disk != 0 {
			res.DiskGb = f.disk
		}
		sp.Resources = &res
	}
	return sp, nil
}
