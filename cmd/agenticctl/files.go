package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentic-sandbox/agentic-sandbox/gen/restapi"
	"github.com/agentic-sandbox/agentic-sandbox/internal/tarsafe"
	"golang.org/x/term"
)

const cpUsage = `Usage: agenticctl cp [-q] SRC DST

Copy a file or a directory between this machine and an agent, like docker cp:
exactly one of SRC and DST is AGENT:PATH. PATH is absolute, or relative to the
agent's working directory, the one its commands start in ('agenticctl exec
AGENT -- pwd' shows it: /tmp in containers and VMs, the environment's own
directory on a host); AGENT: alone is that directory. A directory is copied
whole, symlinks kept as links. Copying into an existing directory, or to a
PATH ending in '/' (made if missing), puts SRC inside it under its own name;
any other PATH is the copy's name. '-' as the local side is stdin or stdout
(one file's bytes). A local path with a colon is written ./like:this.

Examples:
  agenticctl cp ./repo dev-1:            # dev-1's working directory, as repo
  agenticctl cp notes.md dev-1:docs/     # into docs/ there
  agenticctl cp dev-1:repo/out.txt .     # back into this directory

Large transfers show their progress on stderr (-q: none).
`

const lsUsage = `Usage: agenticctl ls [--json] AGENT:PATH

List a directory on an agent (or show one file): TYPE MODE SIZE MODIFIED NAME.
A relative PATH starts in the agent's working directory; AGENT: alone lists it.
`

// progressFrom is the size above which a transfer shows its progress.
const progressFrom = 8 << 20

// remotePath splits AGENT:PATH; ok is false for a local path.
func remotePath(s string) (agent, p string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 || strings.ContainsRune(s[:i], '/') {
		return "", "", false
	}
	p = s[i+1:]
	if p == "" {
		p = "."
	}
	return s[:i], p, true
}

func (c *cli) ls(args []string) int {
	flags := c.flagSet("agenticctl ls")
	asJSON := flags.Bool("json", false, "print the listing as the server's JSON")
	if code, ok := c.operands(flags, lsUsage, args, 1, "ls takes one AGENT:PATH\n"+lsUsage); !ok {
		return code
	}
	agent, p, ok := remotePath(flags.Arg(0))
	if !ok {
		return c.fail("ls: %q is not AGENT:PATH", flags.Arg(0))
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	resp, err := cl.ListFilesWithResponse(context.Background(), agent, &restapi.ListFilesParams{Path: p})
	if err != nil || resp.JSON200 == nil {
		return c.failed(server, err, resp)
	}
	return c.list(*asJSON, resp.Body, "TYPE\tMODE\tSIZE\tMODIFIED\tNAME", func(w io.Writer) {
		for _, e := range resp.JSON200.Entries {
			name := clean(e.Name)
			if e.LinkTarget != nil {
				name += " -> " + clean(*e.LinkTarget)
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", cell(string(e.Type)), cell(e.Mode), e.Size, e.Mtime.UTC().Format(time.RFC3339), name)
		}
		if resp.JSON200.Truncated != nil && *resp.JSON200.Truncated {
			fmt.Fprintf(w, "…\t(more entries than one listing holds)\n")
		}
	})
}

// remoteFiles is the part of the API cp uses, with the server named for errors.
type remoteFiles struct {
	c      *cli
	cl     *restapi.ClientWithResponses
	server string
	agent  string
}

// errReported is an error already written to stderr.
var errReported = errors.New("reported")

// fail reports an API error answer.
func (r *remoteFiles) fail(status int, body []byte) error {
	r.c.apiError(status, body)
	return errReported
}

// stat finds p's own entry by listing its parent; nil, nil when it does
// not exist.
func (r *remoteFiles) stat(p string) (*restapi.FileEntry, error) {
	clean := path.Clean(p)
	if clean == "/" || clean == "." {
		return &restapi.FileEntry{Name: clean, Type: restapi.Dir}, nil
	}
	resp, err := r.cl.ListFilesWithResponse(context.Background(), r.agent, &restapi.ListFilesParams{Path: path.Dir(clean)})
	if err != nil {
		r.c.unreachable(r.server, err)
		return nil, errReported
	}
	var e restapi.Error
	if resp.StatusCode() == http.StatusNotFound && json.Unmarshal(resp.Body, &e) == nil && e.Code == "file_not_found" {
		return nil, nil
	}
	if resp.JSON200 == nil {
		return nil, r.fail(resp.StatusCode(), resp.Body)
	}
	for _, e := range resp.JSON200.Entries {
		if e.Name == path.Base(clean) {
			return &e, nil
		}
	}
	return nil, nil
}

func (c *cli) cp(args []string) int {
	flags := c.flagSet("agenticctl cp")
	quiet := flags.Bool("q", false, "show no progress")
	if code, ok := c.operands(flags, cpUsage, args, 2, "cp takes SRC and DST\n"+cpUsage); !ok {
		return code
	}
	src, dst := flags.Arg(0), flags.Arg(1)
	sAgent, sPath, sRemote := remotePath(src)
	dAgent, dPath, dRemote := remotePath(dst)
	if sRemote == dRemote {
		return c.fail("cp: exactly one of SRC and DST must be AGENT:PATH (copy between agents through this machine)")
	}
	cl, server, err := c.client()
	if err != nil {
		return c.fail("%v", err)
	}
	var copyErr error
	if dRemote {
		r := &remoteFiles{c: c, cl: cl, server: server, agent: dAgent}
		copyErr = c.upload(r, src, dPath, *quiet)
	} else {
		r := &remoteFiles{c: c, cl: cl, server: server, agent: sAgent}
		copyErr = c.download(r, sPath, dst, *quiet)
	}
	switch {
	case errors.Is(copyErr, errReported):
		return exitError
	case copyErr != nil:
		return c.fail("cp: %v", copyErr)
	}
	return 0
}

// answer turns a transfer's HTTP answer into an error (reported) or nil.
func (r *remoteFiles) answer(resp *http.Response, err error, want int) error {
	if err != nil {
		r.c.unreachable(r.server, err)
		return errReported
	}
	if resp.StatusCode != want {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return r.fail(resp.StatusCode, body)
	}
	return nil
}

// written is answer for an upload, whose answer has no body to read.
func (r *remoteFiles) written(resp *http.Response, err error) error {
	if err := r.answer(resp, err, http.StatusNoContent); err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

func withLength(n int64) restapi.RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		req.ContentLength = n
		if n == 0 {
			req.Body = http.NoBody
		}
		return nil
	}
}

func (c *cli) upload(r *remoteFiles, local, rpath string, quiet bool) error {
	ctx := context.Background()
	if local == "-" {
		resp, err := r.cl.WriteFileWithBody(ctx, r.agent, &restapi.WriteFileParams{Path: rpath}, "application/octet-stream", c.progress(c.stdin, -1, quiet))
		return r.written(resp, err)
	}
	fi, err := os.Stat(local)
	if err != nil {
		return err
	}
	target := rpath
	existing, err := r.stat(rpath)
	if err != nil {
		return err
	}
	if (existing != nil && existing.Type == restapi.Dir) || strings.HasSuffix(rpath, "/") {
		target = path.Join(rpath, filepath.Base(filepath.Clean(local)))
	}
	if fi.IsDir() {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tarsafe.Create(pw, local)) }()
		body := c.progress(pr, -1, quiet)
		resp, err := r.cl.WriteArchiveWithBody(ctx, r.agent, &restapi.WriteArchiveParams{Path: target}, "application/x-tar", body)
		pr.CloseWithError(errors.New("upload over"))
		return r.written(resp, err)
	}
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close()
	mode := fmt.Sprintf("%04o", fi.Mode().Perm())
	resp, err := r.cl.WriteFileWithBody(ctx, r.agent, &restapi.WriteFileParams{Path: target, Mode: &mode}, "application/octet-stream",
		c.progress(f, fi.Size(), quiet), withLength(fi.Size()))
	return r.written(resp, err)
}

func (c *cli) download(r *remoteFiles, rpath, local string, quiet bool) error {
	ctx := context.Background()
	if local == "-" {
		resp, err := r.cl.ReadFile(ctx, r.agent, &restapi.ReadFileParams{Path: rpath})
		if err := r.answer(resp, err, http.StatusOK); err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(c.stdout, c.progress(resp.Body, resp.ContentLength, quiet))
		return err
	}
	entry, err := r.stat(rpath)
	if err != nil {
		return err
	}
	if entry == nil {
		return fmt.Errorf("%s:%s: no such file or directory", r.agent, rpath)
	}
	target := local
	if fi, err := os.Stat(local); err == nil && fi.IsDir() {
		target = filepath.Join(local, path.Base(path.Clean(rpath)))
	}
	switch entry.Type {
	case restapi.Symlink:
		if entry.LinkTarget == nil {
			return fmt.Errorf("%s:%s: a symlink without a target", r.agent, rpath)
		}
		return os.Symlink(*entry.LinkTarget, target)
	case restapi.Dir:
		resp, err := r.cl.ReadArchive(ctx, r.agent, &restapi.ReadArchiveParams{Path: rpath})
		if err := r.answer(resp, err, http.StatusOK); err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		// Extract checks the whole archive before writing: one cut short
		// by a lost agent writes nothing.
		return tarsafe.Extract(c.progress(resp.Body, -1, quiet), target)
	case restapi.File:
		resp, err := r.cl.ReadFile(ctx, r.agent, &restapi.ReadFileParams{Path: rpath})
		if err := r.answer(resp, err, http.StatusOK); err != nil {
			return err
		}
		defer resp.Body.Close()
		mode := fs.FileMode(0o644)
		if m, err := strconv.ParseUint(entry.Mode, 8, 32); err == nil {
			mode = fs.FileMode(m).Perm()
		}
		return writeLocal(target, mode, c.progress(resp.Body, resp.ContentLength, quiet))
	}
	return fmt.Errorf("%s:%s is a %s; only files, directories and symlinks are copied", r.agent, rpath, entry.Type)
}

// writeLocal writes under a temporary name and renames at the end: a
// transfer cut short leaves no partial file under target.
func writeLocal(target string, mode fs.FileMode, r io.Reader) error {
	tmp, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return fmt.Errorf("transfer cut short: %w", err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), target)
}

// progress wraps a transfer's reader so that a large one reports on stderr:
// in place on a terminal, a line every few seconds otherwise.
func (c *cli) progress(r io.Reader, total int64, quiet bool) io.Reader {
	if quiet || (total >= 0 && total < progressFrom) {
		return r
	}
	f, isFile := c.stderr.(*os.File)
	return &progressReader{r: r, total: total, w: c.stderr, tty: isFile && term.IsTerminal(int(f.Fd())), start: time.Now()}
}

type progressReader struct {
	r     io.Reader
	w     io.Writer
	tty   bool
	total int64
	done  int64
	start time.Time
	last  time.Time
	once  sync.Once
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.done += int64(n)
	every := 3 * time.Second
	if p.tty {
		every = 200 * time.Millisecond
	}
	if now := time.Now(); now.Sub(p.last) >= every && p.done >= progressFrom {
		p.last = now
		p.report(false)
	}
	if err != nil {
		p.once.Do(func() { p.report(true) })
	}
	return n, err
}

func (p *progressReader) report(final bool) {
	if p.done < progressFrom {
		return
	}
	el := time.Since(p.start)
	rate := float64(p.done) / max(el.Seconds(), 1e-3) / (1 << 20)
	line := mib(p.done)
	if p.total >= 0 {
		line += fmt.Sprintf(" / %s (%d%%)", mib(p.total), p.done*100/max(p.total, 1))
	}
	line += fmt.Sprintf("  %.1f MiB/s", rate)
	if final {
		line = fmt.Sprintf("copied %s in %s (%.1f MiB/s)", mib(p.done), el.Round(time.Millisecond), rate)
	}
	switch {
	case p.tty && final:
		fmt.Fprintf(p.w, "\r\033[K%s\n", line)
	case p.tty:
		fmt.Fprintf(p.w, "\r\033[K%s", line)
	default:
		fmt.Fprintln(p.w, line)
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
