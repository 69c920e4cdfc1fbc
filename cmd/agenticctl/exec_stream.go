package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
)

// acceptStreamed asks POST …/exec for its output as it comes (openapi.yaml,
// execCommand): raw multipart parts, or NDJSON lines from a server that
// has only those.
func acceptStreamed(_ context.Context, r *http.Request) error {
	r.Header.Set("Accept", "multipart/mixed, application/x-ndjson;q=0.9")
	return nil
}

// streamed is the streamed form the server answered with ("" for none)
// and, for multipart, its boundary.
func streamed(resp *http.Response) (form, boundary string) {
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", ""
	}
	switch {
	case mt == "multipart/mixed" && params["boundary"] != "":
		return mt, params["boundary"]
	case mt == "application/x-ndjson":
		return mt, ""
	}
	return "", ""
}

// execMultipart copies each part of a multipart exec answer to stdout or
// stderr as it arrives, the bytes as the command wrote them, then reports
// the end part as the JSON form's answer would be.
func (c *cli) execMultipart(body io.Reader, boundary string, wait int) int {
	mr := multipart.NewReader(body, boundary)
	buf := make([]byte, 64<<10)
	for {
		p, err := mr.NextPart()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return c.fail("the server's answer ended before the command's exit status: %v", err)
		}
		_, disp, _ := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
		var out io.Writer
		switch disp["name"] {
		case "stdout":
			out = c.stdout
		case "stderr":
			out = c.stderr
		case "end":
			var end restapi.ExecStreamEnd
			b, err := io.ReadAll(io.LimitReader(p, 1<<20))
			if err == nil {
				err = json.Unmarshal(b, &end)
			}
			if err != nil {
				return c.fail("unexpected end part from the server: %v: %s", err, clip(string(b)))
			}
			return c.streamEnd(end, b, wait)
		default:
			return c.fail("unexpected part from the server: %v", p.Header)
		}
		for {
			n, err := p.Read(buf)
			// The command's own output goes through untouched, written as
			// it comes (write errors ignored, as for NDJSON lines: the
			// exit status still counts).
			_, _ = out.Write(buf[:n])
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return c.fail("the server's answer was cut: %v", err)
			}
		}
	}
}

// streamEnd reports a streamed exec's end (line or part) as the JSON
// form's answer would be.
func (c *cli) streamEnd(end restapi.ExecStreamEnd, raw []byte, wait int) int {
	if end.Code != nil {
		// The agent lost the command: the JSON form's 502.
		b, _ := json.Marshal(restapi.Error{Error: deref(end.Error), Code: *end.Code})
		return c.apiError(http.StatusBadGateway, b)
	}
	if end.ExitCode == nil {
		return c.fail("the server's exit status has no exit code: %s", clip(string(raw)))
	}
	return c.execEnded(end.Error, isTrue(end.TimedOut), isTrue(end.Truncated), *end.ExitCode, isTrue(end.Success), wait)
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
			return c.streamEnd(l.ExecStreamEnd, line, wait)
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
