package main

import (
	"io"
	"strings"
	"testing"
)

// AGENTIC_LIBVIRT_RESTORE takes 0, 1 or all; anything else stops the start
// instead of quietly meaning one of them.
func TestLibvirtRestoreSetting(t *testing.T) {
	base := []string{"SECRETS_DIR=" + t.TempDir() + "/secrets", "AGENTIC_RUNTIMES=host"}
	for v, want := range map[string][2]bool{"": {false, false}, "1": {false, false}, "0": {true, false}, "all": {false, true}} {
		env := base
		if v != "" {
			env = append(env, "AGENTIC_LIBVIRT_RESTORE="+v)
		}
		cfg, err := loadConfig([]string{"--config", "/nonexistent"}, env, io.Discard, "test")
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		if got := [2]bool{cfg.LibvirtNoRestore, cfg.LibvirtRestoreAll}; got != want {
			t.Errorf("%q: no restore, all = %v, want %v", v, got, want)
		}
	}
	for _, bad := range []string{"yes", "ALL", "2", "0,all"} {
		_, err := loadConfig([]string{"--config", "/nonexistent"}, append(base, "AGENTIC_LIBVIRT_RESTORE="+bad), io.Discard, "test")
		if err == nil || !strings.Contains(err.Error(), "AGENTIC_LIBVIRT_RESTORE") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
