// Package envfile reads KEY=VALUE environment files such as
// /etc/agentic-sandbox/agent.env and /etc/agentic-sandbox/management.env,
// and layers them under flags and the process environment.
//
// Syntax, one assignment per line:
//
//	# a comment line
//	KEY=value                 unquoted: the rest of the line, spaces and tabs trimmed
//	export KEY=value          the "export " prefix is allowed and ignored
//	KEY='literal value'       single quotes: taken as is, no escapes
//	KEY="a\nb \"c\" \\"       double quotes: \n \r \t \" \\ \$ escapes
//
// There are no inline comments after an unquoted value (as in systemd's
// EnvironmentFile), so a '#' in a token or URL stays part of the value. After a
// closing quote only spaces and an optional "# comment" may follow. Quoted
// values cannot span lines. A later assignment of a key replaces an earlier one.
package envfile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
)

// MaxLineBytes is the longest line Parse accepts, without its newline.
const MaxLineBytes = 64 << 10

// ParseError says which line of the input is wrong and why.
type ParseError struct {
	Line int
	Msg  string
}

func (e *ParseError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

var errLineTooLong = errors.New("line too long")

// Parse reads assignments from r. The first error stops parsing; it is a
// *ParseError for a malformed line.
func Parse(r io.Reader) (map[string]string, error) {
	br := bufio.NewReader(r)
	out := make(map[string]string)
	for lineNo := 1; ; lineNo++ {
		line, err := readLine(br)
		if errors.Is(err, errLineTooLong) {
			return nil, &ParseError{Line: lineNo, Msg: fmt.Sprintf("line longer than %d bytes", MaxLineBytes)}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("line %d: read: %w", lineNo, err)
		}
		if line != nil {
			if lineNo == 1 {
				// Editors on other systems may prepend a UTF-8 byte order mark.
				line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
			}
			key, value, ok, msg := parseLine(line)
			if msg != "" {
				return nil, &ParseError{Line: lineNo, Msg: msg}
			}
			if ok {
				out[key] = value
			}
		}
		if err != nil { // io.EOF
			return out, nil
		}
	}
}

// readLine returns the next line without its "\n" (and a "\r" before it), or
// nil with io.EOF at the end of the input. A last line without a newline is
// returned together with io.EOF.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > MaxLineBytes+2 { // room for "\r\n"
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && len(line) == 0 {
			return nil, err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) > MaxLineBytes {
			return nil, errLineTooLong
		}
		return line, err
	}
}

// parseLine returns the assignment on one line; ok is false for blank and
// comment lines; msg is non-empty when the line is malformed.
func parseLine(raw []byte) (key, value string, ok bool, msg string) {
	if bytes.IndexByte(raw, 0) >= 0 {
		return "", "", false, "NUL byte"
	}
	line := trimBlank(string(raw))
	if line == "" || line[0] == '#' {
		return "", "", false, ""
	}
	if rest, found := strings.CutPrefix(line, "export"); found && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
		line = trimBlank(rest)
	}
	k, v, found := strings.Cut(line, "=")
	if !found {
		return "", "", false, "missing '=' (want KEY=VALUE)"
	}
	key = trimBlank(k)
	if !ValidKey(key) {
		if key == "" {
			return "", "", false, "empty key"
		}
		return "", "", false, fmt.Sprintf("invalid key %q (want [A-Za-z_][A-Za-z0-9_]*)", key)
	}
	value, msg = parseValue(trimBlank(v))
	if msg != "" {
		return "", "", false, fmt.Sprintf("key %s: %s", key, msg)
	}
	return key, value, true, ""
}

func parseValue(v string) (string, string) {
	if v == "" {
		return "", ""
	}
	var val, rest string
	switch v[0] {
	case '\'':
		end := strings.IndexByte(v[1:], '\'')
		if end < 0 {
			return "", "unterminated single quote"
		}
		val, rest = v[1:1+end], v[2+end:]
	case '"':
		var b strings.Builder
		i := 1
		for ; i < len(v); i++ {
			c := v[i]
			if c == '"' {
				break
			}
			if c == '\\' && i+1 < len(v) {
				i++
				switch e := v[i]; e {
				case 'n':
					b.WriteByte('\n')
				case 'r':
					b.WriteByte('\r')
				case 't':
					b.WriteByte('\t')
				case '"', '\\', '$':
					b.WriteByte(e)
				default:
					// Unknown escapes stay as written, as in a shell's double quotes.
					b.WriteByte('\\')
					b.WriteByte(e)
				}
				continue
			}
			b.WriteByte(c)
		}
		if i >= len(v) {
			return "", "unterminated double quote"
		}
		val, rest = b.String(), v[i+1:]
	default:
		return v, ""
	}
	if rest = trimBlank(rest); rest != "" && rest[0] != '#' {
		return "", fmt.Sprintf("unexpected text after closing quote: %q", clip(rest))
	}
	return val, ""
}

func clip(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}

// trimBlank trims spaces and tabs only: other bytes may be part of a value.
func trimBlank(s string) string { return strings.Trim(s, " \t") }

// ValidKey reports whether k matches [A-Za-z_][A-Za-z0-9_]*.
func ValidKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// Format writes m in the syntax Parse reads, one line per key in sorted order,
// quoting only values that need it. Keys must be valid (see ValidKey) and
// values free of NUL bytes, as in any map Parse returns; Parse(Format(m))
// then yields m again.
func Format(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		writeValue(&b, m[k])
		b.WriteByte('\n')
	}
	return b.String()
}

func writeValue(b *strings.Builder, v string) {
	if !needsQuotes(v) {
		b.WriteString(v)
		return
	}
	b.WriteByte('"')
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\', '"':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

func needsQuotes(v string) bool {
	if v == "" {
		return false
	}
	if v[0] == '"' || v[0] == '\'' || v != trimBlank(v) {
		return true
	}
	return strings.ContainsAny(v, "\n\r")
}

// Load parses the file at path. A missing file is not an error: it yields an
// empty map, since the env files are optional.
func Load(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Source looks a setting up in flags, then the environment, then the file.
// A key present in a higher layer wins even when its value is empty, so an
// operator can blank out a file setting with FOO= in the environment.
type Source struct {
	flags, env, file map[string]string
}

// NewSource builds a lookup over flags (the flags that were set), environ
// (as from os.Environ) and file (as from Load). The inputs are copied.
func NewSource(flags map[string]string, environ []string, file map[string]string) *Source {
	env := make(map[string]string, len(environ))
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		// The first entry wins, as with getenv(3) and os.Getenv.
		if _, dup := env[k]; !dup {
			env[k] = v
		}
	}
	return &Source{flags: copyMap(flags), env: env, file: copyMap(file)}
}

func copyMap(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Get returns the value of key from the highest layer that has it.
func (s *Source) Get(key string) (string, bool) {
	for _, layer := range []map[string]string{s.flags, s.env, s.file} {
		if v, ok := layer[key]; ok {
			return v, true
		}
	}
	return "", false
}

// GetDefault returns the value of key, or def when no layer has it.
func (s *Source) GetDefault(key, def string) string {
	if v, ok := s.Get(key); ok {
		return v
	}
	return def
}
