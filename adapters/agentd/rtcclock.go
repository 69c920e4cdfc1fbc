package agentd

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// A VM restored from a saved state (woken from hibernation) resumes with
// its system clock where the save left it: hours behind after a night's
// sleep, and nothing in the guest corrects it (no NTP). Its RTC is right:
// QEMU's follows the host's clock across a save and restore. So after each
// registration over a serial link (a VM's: a woken guest's agent registers
// again right after the restore) the agent steps the system clock forward
// to the RTC's when it is behind by more than rtcSlack. Never backwards,
// and not for a difference within the RTC's one-second resolution.
const rtcSlack = 2 * time.Second

// rtcSinceEpoch is the RTC's time as Linux shows it (rtc_cmos, whole
// seconds).
const rtcSinceEpoch = "/sys/class/rtc/rtc0/since_epoch"

// readRTC reads the RTC: the true time is within the second it shows, so
// the middle of that second is at most half a second off.
func readRTC() (time.Time, error) {
	b, err := os.ReadFile(rtcSinceEpoch)
	if err != nil {
		return time.Time{}, err
	}
	s, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(s, int64(500*time.Millisecond)), nil
}

// clockFromRTC steps a VM's system clock forward to its RTC's when it is
// behind (see above).
func (a *Agent) clockFromRTC() {
	if !a.serialLink() || a.guest.readRTC == nil {
		return
	}
	rtc, err := a.guest.readRTC()
	if err != nil {
		return // no RTC: nothing to go by
	}
	behind := time.Until(rtc)
	if behind <= rtcSlack {
		return
	}
	if err := a.guest.setClock(rtc.UnixNano()); err != nil {
		a.log.Warn("the system clock is behind the RTC (restored from a saved state?) and cannot be set", "behind", behind.Round(time.Millisecond), "err", err)
		return
	}
	a.log.Info("the system clock was behind the RTC (restored from a saved state); set it", "behind", behind.Round(time.Millisecond))
}
