package main

import "testing"

func TestRemotePath(t *testing.T) {
	for _, c := range []struct {
		in, agent, path string
		remote          bool
	}{
		{"dev-1:/work/x", "dev-1", "/work/x", true},
		{"dev-1:rel/x", "dev-1", "rel/x", true},
		{"dev-1:", "dev-1", ".", true},
		{"./a:b", "", "", false},
		{"/abs/a:b", "", "", false},
		{"plain", "", "", false},
		{":x", "", "", false},
		{"-", "", "", false},
	} {
		agent, p, ok := remotePath(c.in)
		if ok != c.remote || agent != c.agent || p != c.path {
			t.Errorf("remotePath(%q) = %q %q %v, want %q %q %v", c.in, agent, p, ok, c.agent, c.path, c.remote)
		}
	}
}
