package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// acceptNDJSON asks POST …/exec for its output streamed as it comes
// (openapi.yaml, execCommand).
func acceptNDJSON(_ context.Context, r *http.Request) error {
	r.Header.Set("Accept", "application/x-ndjson")
	return nil
}

// streamed says the server answered with the NDJSON stream.
func streamed(resp *http.Response) bool {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return err == nil && resp.StatusCode == http.StatusOK && mt == "application/x-ndjson"
}

// execStreamed prints each chunk of a streamed exec as it arrives, then
// reports its last line as the JSON form's answer would be.
func (c *cli) execStreamed(body io.Reader, wait int) int {
	rd := bufio.NewReaderSize(body, 64<<10)
	for {
		line, err := rd.ReadBytes('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return c.fail("the server's answer ended before the command's exit status: %v", err)
		}
		var l struct {
			restapi.ExecStreamEnd
			Stream  string  `json:"stream"`
			Data    *string `json:"data"`
			DataB64 []byte  `json:"data_b64"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			return c.fail("unexpected line from the server: %v: %s", err, clip(string(line)))
		}
		out := c.stdout
		switch l.Stream {
		case "":
			if l.Code != nil {
				// The agent lost the command: the JSON form's 502.
				b, _ := json.Marshal(restapi.Error{Error: deref(l.Error), Code: *l.Code})
				return c.apiError(http.StatusBadGateway, b)
			}
			if l.ExitCode == nil {
				return c.fail("the server's last line has no exit status: %s", clip(string(line)))
			}
			return c.execEnded(l.Error, isTrue(l.TimedOut), isTrue(l.Truncated), *l.ExitCode, isTrue(l.Success), wait)
		case "stderr":
			out = c.stderr
		}
		// The command's own output goes through untouched.
		if l.Data != nil {
			_, _ = io.WriteString(out, *l.Data)
		} else {
			_, _ = out.Write(l.DataB64)
		}
	}
}

func isTrue(b *bool) bool { return b != nil && *b }
