package httpstream

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/internal/testkit"
)

// Each read reaches the client before the next is made: nothing buffers.
func TestCopyFlushesEachRead(t *testing.T) {
	pr, pw := io.Pipe()
	var tee bytes.Buffer
	done := make(chan int64, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		done <- Copy(w, pr, &tee)
	}))
	defer srv.Close()
	// The answer's header goes with the first write: the client reads in
	// a goroutine of its own while the test writes.
	lines := make(chan string)
	go func() {
		defer close(lines)
		resp, err := http.Get(srv.URL)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			lines <- l
		}
	}()
	for _, ev := range []string{"data: one\n", "data: two\n"} {
		if _, err := io.WriteString(pw, ev); err != nil {
			t.Fatal(err)
		}
		if got := testkit.Receive(t, 15*time.Second, lines, "the event"); got != ev {
			t.Fatalf("got %q, want %q", got, ev)
		}
	}
	_ = pw.Close()
	if n := testkit.Receive(t, 15*time.Second, done, "the copy's end"); n != 20 || tee.String() != "data: one\ndata: two\n" {
		t.Fatalf("copied %d, tee %q", n, tee.String())
	}
}
