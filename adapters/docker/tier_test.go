package docker

import "testing"

// runsc lets a sandbox connect to a host unix socket only when told so:
// --host-uds=open or all (either spelling of a flag, the value joined or
// its own argument), or the deprecated --fsgofer-host-uds.
func TestHostUDSAllowed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--network=none"}, false},
		{[]string{"--host-uds=open"}, true},
		{[]string{"--platform=systrap", "-host-uds=all"}, true},
		{[]string{"--host-uds", "open"}, true},
		{[]string{"--host-uds=create"}, false},
		{[]string{"--host-uds=none"}, false},
		{[]string{"--host-uds=openly"}, false},
		{[]string{"--fsgofer-host-uds"}, true},
		{[]string{"--fsgofer-host-uds=true"}, true},
		{[]string{"--fsgofer-host-uds=false"}, false},
		{[]string{"--debug-log=/tmp/x--host-uds=open"}, false},
	} {
		if got := HostUDSAllowed(tc.args); got != tc.want {
			t.Errorf("HostUDSAllowed(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}
