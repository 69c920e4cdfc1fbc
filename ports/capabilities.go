package ports

import (
	"fmt"
	"math"
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
