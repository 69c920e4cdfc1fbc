package main

import (
	"errors"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/adapters/preview"
	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// A preview URL's name: exact first (an environment or a plain agent);
// the host form folds case, and a fold matching two names is refused.
func TestPreviewTargets(t *testing.T) {
	envs := func() []string { return []string{"Dev", "api.v2", "twin", "TWIN"} }
	agents := []string{"host-01", "Dev"}
	known := func(id string) bool {
		for _, a := range agents {
			if a == id {
				return true
			}
		}
		return false
	}
	resolve := previewTargets(envs, known, func() []string { return agents })
	for _, c := range []struct {
		name string
		fold bool
		want string
		err  error
	}{
		{"Dev", false, "Dev", nil},
		{"dev", false, "", ports.ErrEnvNotFound},
		{"dev", true, "Dev", nil},
		{"API.V2", true, "api.v2", nil},
		{"host-01", false, "host-01", nil},
		{"HOST-01", true, "host-01", nil},
		{"twin", true, "twin", nil}, // exact wins
		{"Twin", true, "", preview.ErrAmbiguousName},
		{"nobody", true, "", ports.ErrEnvNotFound},
	} {
		got, err := resolve(c.name, c.fold)
		if got != c.want || (c.err == nil) != (err == nil) || (c.err != nil && !errors.Is(err, c.err)) {
			t.Errorf("%q fold=%v: %q %v, want %q %v", c.name, c.fold, got, err, c.want, c.err)
		}
	}
}
