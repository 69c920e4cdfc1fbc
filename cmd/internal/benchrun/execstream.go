package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/cmd/internal/harness"
)

// execStreamBench is `benchrun -only execstream` (and part of a full run):
// 1 MiB of output (`cat` of a file, text and then random bytes) through
// REST exec as the JSON answer, as the NDJSON stream (Accept:
// application/x-ndjson) and as raw multipart parts (Accept:
// multipart/mixed), each received and decoded to the bytes by the client, beside a local `cat` into a buffer, interleaved call by call so
// all three see the same machine state.
func execStreamBench(bins harness.Binaries) error {
	srv, stop, err := hostServer(bins, "execstream", nil, nil)
	if err != nil {
		return err
	}
	defer stop()
	post := execPoster(srv)
	const size, reps = 1 << 20, 50
	fmt.Printf("# agentic-sandbox exec output, JSON vs NDJSON vs multipart, %s\n\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Println("| 1 MiB of output | n | p50 | MiB/s at p50 | × local `cat` |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	for _, kind := range []string{"text", "random bytes"} {
		data := make([]byte, size)
		if _, err := rand.Read(data); err != nil {
			return err
		}
		if kind == "text" {
			data = []byte(base64.StdEncoding.EncodeToString(data))[:size]
		}
		f, err := os.CreateTemp("", "agentic-bench-stream-")
		if err != nil {
			return err
		}
		defer os.Remove(f.Name())
		if _, err := f.Write(data); err != nil {
			return err
		}
		f.Close()
		body := fmt.Sprintf(`{"command":"cat","args":[%q]}`, f.Name())
		check := func(got []byte) error {
			if !bytes.Equal(got, data) {
				return fmt.Errorf("output differs: %d bytes", len(got))
			}
			return nil
		}
		var jsonRecv time.Duration
		mpOut := make([]byte, 0, 2*size)
		variants := []struct {
			name string
			f    func() error
		}{
			{"local `cat` into a buffer (floor)", func() error {
				var buf bytes.Buffer
				c := exec.Command("cat", f.Name())
				c.Stdout = &buf
				if err := c.Run(); err != nil {
					return err
				}
				return check(buf.Bytes())
			}},
			{"REST exec, JSON answer received and decoded", func() error {
				start := time.Now()
				resp, err := post(body, "")
				if err != nil {
					return err
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					return err
				}
				jsonRecv = time.Since(start)
				var r struct {
					Stdout   string `json:"stdout"`
					Encoding string `json:"encoding"`
				}
				if err := json.Unmarshal(b, &r); err != nil {
					return err
				}
				out := []byte(r.Stdout)
				if r.Encoding == "base64" {
					if out, err = base64.StdEncoding.DecodeString(r.Stdout); err != nil {
						return err
					}
				}
				return check(out)
			}},
			{"REST exec, `Accept: application/x-ndjson`, streamed and decoded", func() error {
				resp, err := post(body, "application/x-ndjson")
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				var out []byte
				rd := bufio.NewReaderSize(resp.Body, 64<<10)
				for {
					line, err := rd.ReadSlice('\n')
					if err == bufio.ErrBufferFull {
						// A line longer than the buffer: read it whole
						// (line is the reader's buffer: copied first).
						head := append([]byte(nil), line...)
						rest, rerr := rd.ReadBytes('\n')
						line, err = append(head, rest...), rerr
					}
					if err != nil {
						return fmt.Errorf("stream cut: %w", err)
					}
					var l struct {
						Stream   string  `json:"stream"`
						Data     *string `json:"data"`
						DataB64  []byte  `json:"data_b64"`
						ExitCode *int    `json:"exit_code"`
					}
					if err := json.Unmarshal(line, &l); err != nil {
						return err
					}
					if l.Stream == "" {
						if l.ExitCode == nil || *l.ExitCode != 0 {
							return fmt.Errorf("last line %s", line)
						}
						return check(out)
					}
					if l.Data != nil {
						out = append(out, *l.Data...)
					} else {
						out = append(out, l.DataB64...)
					}
				}
			}},
			{"REST exec, `Accept: multipart/mixed`, streamed and parsed", func() error {
				resp, err := post(body, "multipart/mixed")
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				out, code, err := readMultipartExec(resp, mpOut[:0])
				if err != nil {
					return err
				}
				// To its end, so that the connection is kept.
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					return err
				}
				if code != 0 {
					return fmt.Errorf("exit %d", code)
				}
				return check(out)
			}},
		}
		times := make([][]time.Duration, len(variants)+1)
		for r := range reps + 5 { // the first 5 warm up
			for i, v := range variants {
				start := time.Now()
				if err := v.f(); err != nil {
					return fmt.Errorf("%s, %s: %w", kind, v.name, err)
				}
				if r >= 5 {
					times[i] = append(times[i], time.Since(start))
					if i == 1 {
						times[len(variants)] = append(times[len(variants)], jsonRecv)
					}
				}
			}
		}
		names := []string{variants[0].name, variants[1].name, variants[2].name, variants[3].name, "  (of which the JSON answer received, before decoding)"}
		var floor time.Duration
		for i, d := range times {
			sortDurations(d)
			p50 := d[len(d)/2]
			if i == 0 {
				floor = p50
			}
			fmt.Printf("| %s: %s | %d | %s | %.0f | %.2f× |\n", kind, names[i], len(d), ms(p50), 1/p50.Seconds(), float64(floor)/float64(p50))
		}
	}
	return nil
}
