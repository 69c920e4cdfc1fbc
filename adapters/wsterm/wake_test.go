package wsterm

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agentic-sandbox/agentic-sandbox/ports"
)

// A wake that failed reaches the viewer as an error frame of its own code,
// with the reason.
func TestAFailedWakeIsAnErrorFrameOfItsOwn(t *testing.T) {
	err := fmt.Errorf("%w: wake: the saved state is gone", ports.ErrWakeFailed)
	f := NewErrorFrame("req-1", mapError(err))
	if f.Type != FrameError || f.ID != "req-1" || f.Code != "wake_failed" || !strings.Contains(f.Message, "saved state is gone") {
		t.Fatalf("frame %+v", f)
	}
}
