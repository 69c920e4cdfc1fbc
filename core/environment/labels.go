package environment

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/agentic-sandbox/agentic-sandbox/core/access"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// ReservedLabelPrefix starts the keys of the labels the server keeps with
// an environment for itself (ports.LabelPool, ports.LabelTier …): a
// request may not name one.
const ReservedLabelPrefix = "agentic-sandbox."

// MaxLabels bounds the labels of one environment.
const MaxLabels = 32

// CheckLabels refuses (ports.ErrInvalidSpec) labels a request may not
// give an environment: more than MaxLabels, a key or value
// access.ValidLabel refuses, or a reserved key.
func CheckLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%w: labels: at most %d", ports.ErrInvalidSpec, MaxLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if strings.HasPrefix(k, ReservedLabelPrefix) {
			return fmt.Errorf("%w: label %q: keys starting with %q are the server's own", ports.ErrInvalidSpec, k, ReservedLabelPrefix)
		}
		if !access.ValidLabel(k, labels[k]) {
			return fmt.Errorf("%w: label %q=%q: keys ([prefix/]name) and values are 1-63 of A-Z a-z 0-9 . _ -, starting and ending with a letter or digit", ports.ErrInvalidSpec, k, labels[k])
		}
	}
	return nil
}

// userLabels are the labels of a runtime's environment that a request
// gave it (nil when none): the internal ones left out.
func userLabels(labels map[string]string) map[string]string {
	var out map[string]string
	for k, v := range labels {
		if strings.HasPrefix(k, ReservedLabelPrefix) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}
