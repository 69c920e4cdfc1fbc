package envfile

import (
	"errors"
	"flag"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want map[string]string
	}{
		{"empty", "", map[string]string{}},
		{"simple", "A=1\nB=two\n", map[string]string{"A": "1", "B": "two"}},
		{"no trailing newline", "A=1", map[string]string{"A": "1"}},
		{"crlf", "A=1\r\nB=2\r\n", map[string]string{"A": "1", "B": "2"}},
		{"comments and blanks", "# c\n\n   \n\t# indented\nA=1\n", map[string]string{"A": "1"}},
		{"whitespace trimmed", "  A \t=  x y  \t\n", map[string]string{"A": "x y"}},
		{"export prefix", "export A=1\nexport\tB=2\n", map[string]string{"A": "1", "B": "2"}},
		{"key named export", "export=1\nexporter=2\n", map[string]string{"export": "1", "exporter": "2"}},
		{"empty value", "A=\nB=''\nC=\"\"\n", map[string]string{"A": "", "B": "", "C": ""}},
		{"equals in value", "URL=http://h/?a=b&c=d\n", map[string]string{"URL": "http://h/?a=b&c=d"}},
		{"hash in unquoted value", "T=abc#def # not a comment\n", map[string]string{"T": "abc#def # not a comment"}},
		{"single quotes literal", `A='  x \n "y" '`, map[string]string{"A": `  x \n "y" `}},
		{"double quote escapes", `A="a\nb\t\"q\" \\ \$x \z"`, map[string]string{"A": "a\nb\t\"q\" \\ $x \\z"}},
		{"comment after quote", `A="v" # note` + "\nB='w'   \n", map[string]string{"A": "v", "B": "w"}},
		{"inner quote unquoted", `A=it's "ok"`, map[string]string{"A": `it's "ok"`}},
		{"last wins", "A=1\nA=2\n", map[string]string{"A": "2"}},
		{"underscore keys", "_=1\n_A9=2\na_b=3\n", map[string]string{"_": "1", "_A9": "2", "a_b": "3"}},
		{"bom", "\xef\xbb\xbfA=1\n", map[string]string{"A": "1"}},
		{"unicode value", "A=héllo ✓\n", map[string]string{"A": "héllo ✓"}},
		{"max line", "A=" + strings.Repeat("x", MaxLineBytes-2) + "\n", map[string]string{"A": strings.Repeat("x", MaxLineBytes-2)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tt.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !maps.Equal(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		line    int
		msgPart string
	}{
		{"no equals", "A=1\njust words\n", 2, "missing '='"},
		{"export without equals", "export A\n", 1, "missing '='"},
		{"empty key", "=x\n", 1, "empty key"},
		{"digit first", "1A=x\n", 1, "invalid key"},
		{"dash in key", "A-B=x\n", 1, "invalid key"},
		{"space in key", "A B=x\n", 1, "invalid key"},
		{"unterminated double", "\n\nA=\"abc\n", 3, "unterminated double quote"},
		{"escaped closing quote", `A="abc\"`, 1, "unterminated double quote"},
		{"trailing backslash", `A="abc\`, 1, "unterminated double quote"},
		{"unterminated single", "A='abc\n", 1, "unterminated single quote"},
		{"text after quote", `A="a"b`, 1, "after closing quote"},
		{"nul byte", "A=1\nB=x\x00y\n", 2, "NUL"},
		{"nul in comment", "# \x00\n", 1, "NUL"},
		{"line too long", "A=1\nB=" + strings.Repeat("x", MaxLineBytes) + "\n", 2, "longer than"},
		{"long line without newline", "B=" + strings.Repeat("x", 3*MaxLineBytes), 1, "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.in))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("want *ParseError, got %v", err)
			}
			if pe.Line != tt.line || !strings.Contains(pe.Msg, tt.msgPart) {
				t.Fatalf("got line %d %q, want line %d containing %q", pe.Line, pe.Msg, tt.line, tt.msgPart)
			}
			if !strings.Contains(err.Error(), "line ") {
				t.Fatalf("error %q does not name the line", err)
			}
		})
	}
}

func TestParseReadError(t *testing.T) {
	boom := errors.New("boom")
	_, err := Parse(io.MultiReader(strings.NewReader("A=1\n"), iotest.ErrReader(boom)))
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("want the read error on line 2, got %v", err)
	}
}

func TestFormatRoundTrip(t *testing.T) {
	m := map[string]string{
		"PLAIN":   "value",
		"EMPTY":   "",
		"SPACES":  "  padded\t",
		"NEWLINE": "a\nb\r\nc\r",
		"QUOTES":  `"dq" and 'sq'`,
		"LEADSQ":  `'x`,
		"BACK":    `C:\path\n`,
		"HASH":    "# not a comment",
		"DOLLAR":  "$HOME",
	}
	s := Format(m)
	got, err := Parse(strings.NewReader(s))
	if err != nil {
		t.Fatalf("Parse(Format): %v\n%s", err, s)
	}
	if !maps.Equal(got, m) {
		t.Fatalf("round trip:\n%s\ngot  %q\nwant %q", s, got, m)
	}
	if !strings.HasPrefix(s, "BACK=") || !strings.Contains(s, "\nPLAIN=value\n") {
		t.Fatalf("want sorted keys and unquoted plain values:\n%s", s)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	m, err := Load(filepath.Join(dir, "missing.env"))
	if err != nil || m == nil || len(m) != 0 {
		t.Fatalf("missing file: got %v, %v; want empty map, nil", m, err)
	}

	p := filepath.Join(dir, "agent.env")
	if err := os.WriteFile(p, []byte("# agent\nAGENT_ID=host-01\nexport MANAGEMENT_SERVER=\"http://127.0.0.1:8120\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err = Load(p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"AGENT_ID": "host-01", "MANAGEMENT_SERVER": "http://127.0.0.1:8120"}
	if !maps.Equal(m, want) {
		t.Fatalf("got %q, want %q", m, want)
	}

	bad := filepath.Join(dir, "bad.env")
	if err := os.WriteFile(bad, []byte("A=1\noops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("want an error naming the file and line 2, got %v", err)
	}

	// A directory is not a missing file: reading it must fail.
	if _, err := Load(dir); err == nil {
		t.Fatal("want an error loading a directory")
	}
}

func TestSource(t *testing.T) {
	flags := map[string]string{"A": "flag", "E": ""}
	environ := []string{"A=env", "B=env", "C=", "B=second", "NOEQUALS", "=weird"}
	file := map[string]string{"A": "file", "B": "file", "C": "file", "D": "file", "E": "file"}
	s := NewSource(flags, environ, file)

	// Later changes by the caller must not leak in.
	flags["A"] = "changed"
	file["F"] = "late"

	tests := []struct {
		key, want string
		ok        bool
	}{
		{"A", "flag", true},
		{"B", "env", true}, // first environ entry wins
		{"C", "", true},    // empty in env still overrides the file
		{"D", "file", true},
		{"E", "", true}, // empty flag overrides the file
		{"F", "", false},
		{"NOEQUALS", "", false},
	}
	for _, tt := range tests {
		v, ok := s.Get(tt.key)
		if v != tt.want || ok != tt.ok {
			t.Errorf("Get(%q) = %q, %v; want %q, %v", tt.key, v, ok, tt.want, tt.ok)
		}
	}
	if got := s.GetDefault("F", "def"); got != "def" {
		t.Errorf("GetDefault missing = %q", got)
	}
	if got := s.GetDefault("C", "def"); got != "" {
		t.Errorf("GetDefault set-but-empty = %q, want empty", got)
	}
	if got := NewSource(nil, nil, nil).GetDefault("X", "d"); got != "d" {
		t.Errorf("nil layers: %q", got)
	}
}

func FuzzParse(f *testing.F) {
	seeds := []string{
		"", "A=1\n", "export A=\"x\\ny\"\n", "A='q'\n# c\nB= v \r\n", "A=\"unterminated\n",
		"\xef\xbb\xbfA=1", "A=\"a\" # c", "A=\"\\z\\$\"", "K=\t\"x\"\t", "=\n", "A\n", "A='b'c",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		for k, v := range m {
			if !ValidKey(k) || strings.IndexByte(v, 0) >= 0 {
				t.Fatalf("Parse accepted key %q value %q", k, v)
			}
		}
		s := Format(m)
		m2, err := Parse(strings.NewReader(s))
		if err != nil {
			t.Fatalf("Parse(Format(m)) failed: %v\ninput %q\nformatted %q", err, data, s)
		}
		if !maps.Equal(m, m2) {
			t.Fatalf("round trip differs\ninput %q\nformatted %q\nfirst %q\nsecond %q", data, s, m, m2)
		}
	})
}

func TestSourceFromFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.env")
	if err := os.WriteFile(path, []byte("A=file\nB=file\nC=file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("a", "", "")
	fs.String("unset", "default-not-a-layer", "")
	if err := fs.Parse([]string{"--a", "flag"}); err != nil {
		t.Fatal(err)
	}
	src, err := SourceFromFlags(fs, map[string]string{"a": "A", "unset": "D"}, []string{"A=env", "B=env"}, path)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"A": "flag", "B": "env", "C": "file"} {
		if got, _ := src.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if _, ok := src.Get("D"); ok {
		t.Error("a flag left at its default counts as set")
	}
	if _, err := SourceFromFlags(fs, nil, nil, t.TempDir()); err == nil {
		t.Error("a directory as the env file is not an error")
	}
}
