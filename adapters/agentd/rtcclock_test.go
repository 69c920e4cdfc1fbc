package agentd

import (
	"errors"
	"testing"
	"time"
)

// A VM's agent steps its clock forward to the RTC when it is behind (a
// restore from a saved state), never backwards nor within the RTC's
// resolution, and only on a serial link (a VM's).
func TestClockFromRTC(t *testing.T) {
	for _, c := range []struct {
		name   string
		url    string
		rtc    time.Duration // the RTC's time relative to the system clock
		rtcErr error
		set    bool
	}{
		{"behind by an hour", "serial:///dev/vport0p1", time.Hour, nil, true},
		{"behind by five seconds", "serial:///dev/vport0p1", 5 * time.Second, nil, true},
		{"within the RTC's resolution", "serial:///dev/vport0p1", time.Second, nil, false},
		{"ahead", "serial:///dev/vport0p1", -time.Hour, nil, false},
		{"no RTC", "serial:///dev/vport0p1", 0, errors.New("no rtc0"), false},
		{"not a VM", "http://127.0.0.1:1", time.Hour, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, err := New(testConfig(c.url, newFakeRunner()))
			if err != nil {
				t.Fatal(err)
			}
			rtc := time.Now().Add(c.rtc)
			var set int64
			a.guest = guestSystem{
				setClock:    func(ns int64) error { set = ns; return nil },
				setHostname: func(string) error { return nil },
				readRTC:     func() (time.Time, error) { return rtc, c.rtcErr },
			}
			a.clockFromRTC()
			if got := set != 0; got != c.set {
				t.Fatalf("clock set: %v, want %v", got, c.set)
			}
			if c.set && set != rtc.UnixNano() {
				t.Fatalf("clock set to %d, want the RTC's %d", set, rtc.UnixNano())
			}
		})
	}
}
