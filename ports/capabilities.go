package ports

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
)

// Limit names a Resources field a runtime can enforce.
type Limit string

const (
	LimitCPUs     Limit = "cpus"
	LimitMemoryMB Limit = "memory_mb"
	LimitPIDs     Limit = "pids"
	LimitDiskGB   Limit = "disk_gb"
)

// RuntimeCapabilities is what an adapter can do, declared once. CheckSpec
// derives from it the rules every spec must pass, so that the environments
// use case and each adapter refuse the same things with the same error.
type RuntimeCapabilities struct {
	Runtime   string // the catalog name: "host", "docker", "libvirt"
	Isolation RuntimeKind
	// Pause: Pause and Resume work.
	Pause bool
	// Hibernate is what Hibernate keeps ("" is HibernateNone): the
	// environment's memory, only its filesystem, or nothing (Hibernate and
	// Wake refuse with ErrUnsupported). Never claimed stronger than the
	// engine at hand does it.
	Hibernate HibernateMode
	// NetworkModes lists the modes Provision accepts; the first is the default.
	NetworkModes []NetworkMode
	// Limits lists the Resources fields it enforces; any other non-zero
	// field is refused rather than silently ignored.
	Limits       []Limit
	ReadOnlyRoot bool
	// Images: the spec may name an image (a container image, a VM disk).
	Images bool
	// Profiles names the presets Profile may choose ("" always may).
	Profiles []string
	// Tiers names the sandboxes stronger than the standard one that a spec
	// may ask for (TierGVisor), those the engine is configured to run.
	Tiers []string
	// Placement: the spec may constrain which node runs it (a scheduler's
	// node selector and tolerations).
	Placement bool
}

// CheckSpec refuses, wrapped in ErrInvalidSpec, a spec a runtime with
// these capabilities cannot honour: a bad name, an agent id that is not
// the name, a missing agent secret, a network mode, limit, profile or
// option it does not declare, or a negative or non-finite resource.
func (c RuntimeCapabilities) CheckSpec(spec EnvironmentSpec) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, a...))
	}
	if !ValidEnvironmentName(spec.Name) {
		return bad("name %q: want 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", spec.Name)
	}
	if spec.Agent.ID != "" && spec.Agent.ID != spec.Name {
		return bad("agent id %q differs from the environment name %q", spec.Agent.ID, spec.Name)
	}
	if spec.Agent.Secret == "" {
		return bad("no agent secret")
	}
	if spec.Network != "" && !slices.Contains(c.NetworkModes, spec.Network) {
		return bad("network %q: the %s runtime offers %s", spec.Network, c.Runtime, NetworkModeList(c.NetworkModes))
	}
	if spec.Image != "" && !c.Images {
		return bad("image %q: the %s runtime runs no images", spec.Image, c.Runtime)
	}
	if spec.Profile != "" && !slices.Contains(c.Profiles, spec.Profile) {
		return bad("profile %q: the %s runtime knows %q", spec.Profile, c.Runtime, c.Profiles)
	}
	if spec.Tier != "" && !slices.Contains(c.Tiers, spec.Tier) {
		if len(c.Tiers) == 0 {
			return bad("isolation %q: the %s runtime offers no tier but its standard one", spec.Tier, c.Runtime)
		}
		return bad("isolation %q: the %s runtime offers %s", spec.Tier, c.Runtime, strings.Join(c.Tiers, ", "))
	}
	if !spec.Placement.Empty() {
		if !c.Placement {
			return bad("placement: the %s runtime has no scheduler to place environments", c.Runtime)
		}
		if err := checkPlacement(spec.Placement); err != nil {
			return bad("placement: %v", err)
		}
	}
	if spec.ReadOnlyRoot && !c.ReadOnlyRoot {
		return bad("a read-only root is not offered by the %s runtime", c.Runtime)
	}
	res := spec.Resources
	if math.IsNaN(res.CPUs) || math.IsInf(res.CPUs, 0) {
		return bad("resources: cpus %v is not a number", res.CPUs)
	}
	for _, f := range []struct {
		limit Limit
		value float64
	}{
		{LimitCPUs, res.CPUs}, {LimitMemoryMB, float64(res.MemoryMB)},
		{LimitPIDs, float64(res.PIDs)}, {LimitDiskGB, float64(res.DiskGB)},
	} {
		switch {
		case f.value < 0:
			return bad("resources: %s must not be negative", f.limit)
		case f.value > 0 && !slices.Contains(c.Limits, f.limit):
			return bad("resources: %s is not enforced by the %s runtime (it enforces %s)", f.limit, c.Runtime, limitNames(c.Limits))
		}
	}
	for k := range spec.Labels {
		if k == "" || strings.ContainsAny(k, " =\n") {
			return bad("label key %q", k)
		}
	}
	return nil
}

func limitNames(ls []Limit) string {
	if len(ls) == 0 {
		return "none"
	}
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = string(l)
	}
	return strings.Join(out, ", ")
}

var (
	// A Kubernetes label key: an optional DNS-subdomain prefix and a name.
	labelKey   = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	labelValue = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`)
)

// Check refuses, unwrapped, a placement whose keys, values, operators or
// effects a scheduler would refuse (CheckSpec wraps it in ErrInvalidSpec).
func (p Placement) Check() error { return checkPlacement(p) }

// checkPlacement refuses keys, values, operators and effects a scheduler
// would refuse, so that a bad placement is a 400 rather than a pod that
// never starts.
func checkPlacement(p Placement) error {
	if len(p.NodeSelector) > 32 || len(p.Tolerations) > 32 {
		return fmt.Errorf("at most 32 node selector labels and 32 tolerations")
	}
	for k, v := range p.NodeSelector {
		if len(k) > 253 || !labelKey.MatchString(k) {
			return fmt.Errorf("node selector key %q is not a label key", k)
		}
		if !labelValue.MatchString(v) {
			return fmt.Errorf("node selector value %q for %s is not a label value", v, k)
		}
	}
	for _, t := range p.Tolerations {
		if t.Key != "" && (len(t.Key) > 253 || !labelKey.MatchString(t.Key)) {
			return fmt.Errorf("toleration key %q is not a label key", t.Key)
		}
		switch t.Operator {
		case "", "Equal":
			if t.Key == "" {
				return fmt.Errorf("a toleration with operator Equal needs a key")
			}
			if !labelValue.MatchString(t.Value) {
				return fmt.Errorf("toleration value %q is not a label value", t.Value)
			}
		case "Exists":
			if t.Value != "" {
				return fmt.Errorf("a toleration with operator Exists takes no value")
			}
		default:
			return fmt.Errorf("toleration operator %q: want Equal or Exists", t.Operator)
		}
		switch t.Effect {
		case "", "NoSchedule", "PreferNoSchedule", "NoExecute":
		default:
			return fmt.Errorf("toleration effect %q: want NoSchedule, PreferNoSchedule or NoExecute", t.Effect)
		}
	}
	return nil
}
