package debugserve

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestProfilesOnLoopbackOnly(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, bad := range []string{"0.0.0.0:0", "10.1.2.3:6060", ":6060", "nonsense"} {
		if err := Start(ctx, bad, log); err == nil {
			t.Errorf("%s: served", bad)
		}
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	if err := Start(ctx, addr, log); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "heap profile") {
		t.Fatalf("heap profile: %d %.100s", resp.StatusCode, b)
	}
}
