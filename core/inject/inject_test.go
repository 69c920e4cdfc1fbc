package inject

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestParseSpec(t *testing.T) {
	for _, c := range []struct {
		host, header, format, env string
		want                      Spec
	}{
		{"api.anthropic.com", "x-api-key", "", "", Spec{"api.anthropic.com", 443, "X-Api-Key", "{}", "ANTHROPIC_BASE_URL"}},
		{"API.Anthropic.com:8443", "X-API-KEY", "", "CLAUDE_URL", Spec{"api.anthropic.com", 8443, "X-Api-Key", "{}", "CLAUDE_URL"}},
		{"api.openai.com", "Authorization: Bearer {}", "", "", Spec{"api.openai.com", 443, "Authorization", "Bearer {}", "OPENAI_BASE_URL"}},
		{"api.github.com", "authorization", "token {}", "GH_API_URL", Spec{"api.github.com", 443, "Authorization", "token {}", "GH_API_URL"}},
	} {
		got, err := ParseSpec(c.host, c.header, c.format, c.env)
		if err != nil || got != c.want {
			t.Errorf("ParseSpec(%q,%q,%q,%q) = %+v, %v; want %+v", c.host, c.header, c.format, c.env, got, err, c.want)
		}
	}
	for _, c := range []struct{ host, header, format, env, field string }{
		{"", "x-api-key", "", "", "inject.host"},
		{"*.anthropic.com", "x-api-key", "", "", "inject.host"},
		{"api.anthropic.com:0", "x-api-key", "", "", "inject.host"},
		{"10.0.0.1", "x-api-key", "", "X", "inject.host"},
		{"https://api.anthropic.com", "x-api-key", "", "", "inject.host"},
		{"api.anthropic.com", "", "", "", "inject.header"},
		{"api.anthropic.com", "x api key", "", "", "inject.header"},
		{"api.anthropic.com", "Host", "", "", "inject.header"},
		{"api.anthropic.com", "cookie", "", "", "inject.header"},
		{"api.anthropic.com", "content-length", "", "", "inject.header"},
		{"api.anthropic.com", "Authorization: Bearer {}", "Bearer {}", "", "inject.header"},
		{"api.anthropic.com", "x-api-key", "Bearer", "", "inject.format"},
		{"api.anthropic.com", "x-api-key", "{} {}", "", "inject.format"},
		{"api.anthropic.com", "x-api-key", "a{}\r\nX-Evil: 1", "", "inject.format"},
		{"example.com", "x-api-key", "", "", "inject.base_url_env"},
		{"example.com", "x-api-key", "", "1BAD", "inject.base_url_env"},
		{"example.com", "x-api-key", "", "A-B", "inject.base_url_env"},
	} {
		_, err := ParseSpec(c.host, c.header, c.format, c.env)
		if !errors.Is(err, ErrBadSpec) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("ParseSpec(%q,%q,%q,%q) = %v; want an error naming %s", c.host, c.header, c.format, c.env, err, c.field)
		}
	}
}

func TestSpecValue(t *testing.T) {
	s, _ := ParseSpec("api.openai.com", "Authorization: Bearer {}", "", "")
	if got := s.Value("sk-1"); got != "Bearer sk-1" {
		t.Fatalf("Value = %q", got)
	}
	// A secret holding "{}" is not expanded again.
	if got := s.Value("a{}b"); got != "Bearer a{}b" {
		t.Fatalf("Value = %q", got)
	}
}

func TestPlaceholder(t *testing.T) {
	p := NewPlaceholder(make([]byte, PlaceholderBytes))
	if !IsPlaceholder(p) || !strings.HasPrefix(p, PlaceholderPrefix) {
		t.Fatalf("%q is not a placeholder", p)
	}
	for _, bad := range []string{"", PlaceholderPrefix, p + "0", strings.ToUpper(p), strings.Replace(p, "0", "g", 1), "sk-ant-" + p} {
		if IsPlaceholder(bad) {
			t.Errorf("%q taken for a placeholder", bad)
		}
	}
}

func TestCheck(t *testing.T) {
	spec, _ := ParseSpec("api.anthropic.com", "x-api-key", "", "")
	ph := NewPlaceholder([]byte("0123456789abcdefghijklmn"))
	good := func() Request {
		return Request{Path: "/v1/messages", Header: map[string][]string{"X-Api-Key": {ph}, "Content-Type": {"application/json"}}, Body: []byte(`{"model":"claude"}`)}
	}
	if r := Check(spec, ph, good()); r != nil {
		t.Fatalf("good request refused: %v", r)
	}
	lower := good()
	lower.Header = map[string][]string{"x-api-key": {ph}}
	if r := Check(spec, ph, lower); r != nil {
		t.Fatalf("lower-case header refused: %v", r)
	}
	for name, mutate := range map[string]func(*Request){
		"no header":           func(r *Request) { delete(r.Header, "X-Api-Key") },
		"another placeholder": func(r *Request) { r.Header["X-Api-Key"] = []string{NewPlaceholder(make([]byte, PlaceholderBytes))} },
		"in the body":         func(r *Request) { r.Body = []byte(`{"echo":"` + ph + `"}`) },
		"in the path":         func(r *Request) { r.Path = "/v1/" + ph },
		"escaped in the path": func(r *Request) { r.Path = "/v1/" + strings.ReplaceAll(ph, "-", "%2D") },
		"in the query":        func(r *Request) { r.RawQuery = "k=" + ph },
		"in another header":   func(r *Request) { r.Header["X-Echo"] = []string{"x " + ph} },
		"in authorization":    func(r *Request) { r.Header["authorization"] = []string{"Bearer " + ph} },
	} {
		req := good()
		mutate(&req)
		r := Check(spec, ph, req)
		if r == nil {
			t.Errorf("%s: let through", name)
			continue
		}
		if r.Code != "placeholder_misplaced" && r.Code != "no_placeholder" || strings.Contains(r.Reason, ph) {
			t.Errorf("%s: refusal %+v", name, r)
		}
	}
	if r := Check(spec, "", good()); r == nil {
		t.Error("an empty placeholder let a request through")
	}
}

func TestFromJSON(t *testing.T) {
	r, ok := FromJSON([]byte(`{"id":"msg_1","model":"claude-sonnet-4-5-20250929","usage":{"input_tokens":12,"output_tokens":34,"cache_read_input_tokens":5}}`))
	if !ok || r != (Response{Model: "claude-sonnet-4-5-20250929", InputTokens: 12, OutputTokens: 34, CacheReadInputTokens: 5}) {
		t.Fatalf("FromJSON = %+v %v", r, ok)
	}
	for _, bad := range []string{``, `{}`, `{"usage":null}`, `[1]`, `{"usage":"x"}`} {
		if _, ok := FromJSON([]byte(bad)); ok {
			t.Errorf("%q gave usage", bad)
		}
	}
}

const stream = "event: message_start\r\n" +
	`data: {"type":"message_start","message":{"id":"m","model":"claude-haiku-4-5","usage":{"input_tokens":25,"output_tokens":1,"cache_creation_input_tokens":100}}}` + "\r\n\r\n" +
	"event: content_block_delta\n" +
	`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"usage \"output_tokens\":999"}}` + "\n\n" +
	"event: message_delta\n" +
	`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}` + "\n\n" +
	"event: message_delta\n" +
	`data: {"type":"message_delta","delta":{},"usage":{"output_tokens":40}}` + "\n\n" +
	"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"

func TestSSEMeterAnyChunking(t *testing.T) {
	want := Response{Model: "claude-haiku-4-5", InputTokens: 25, OutputTokens: 40, CacheCreationInputTokens: 100}
	for size := 1; size <= len(stream); size += 7 {
		var m SSEMeter
		for i := 0; i < len(stream); i += size {
			_, _ = m.Write([]byte(stream[i:min(i+size, len(stream))]))
		}
		if got, ok := m.Response(); !ok || got != want {
			t.Fatalf("chunks of %d: %+v %v", size, got, ok)
		}
	}
}

func TestSSEMeterSkipsHugeLines(t *testing.T) {
	var m SSEMeter
	_, _ = m.Write([]byte("data: " + strings.Repeat("x", maxEventLine) + "\n"))
	if len(m.line) != 0 || cap(m.line) > 2*maxEventLine {
		t.Fatalf("kept %d bytes", len(m.line))
	}
	_, _ = m.Write([]byte(stream))
	if got, ok := m.Response(); !ok || got.OutputTokens != 40 {
		t.Fatalf("after a huge line: %+v %v", got, ok)
	}
	var none SSEMeter
	_, _ = none.Write([]byte("data: {\"type\":\"ping\"}\n\n"))
	if _, ok := none.Response(); ok {
		t.Fatal("a stream without usage gave some")
	}
}

func TestCost(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	// One million of each at Sonnet 4 prices: 3 + 15 + 3.75 + 0.3.
	c, known := DefaultPrices.Cost(Response{Model: "claude-sonnet-4-20250514", InputTokens: 1e6, OutputTokens: 1e6, CacheCreationInputTokens: 1e6, CacheReadInputTokens: 1e6})
	if !known || !near(c, 22.05) {
		t.Fatalf("sonnet cost %v %v", c, known)
	}
	// The longest prefix wins: opus-4-5 is not priced as opus-4.
	if c, _ := DefaultPrices.Cost(Response{Model: "claude-opus-4-5-20251101", OutputTokens: 1e6}); !near(c, 25) {
		t.Fatalf("opus 4.5 output %v", c)
	}
	// An unknown model is priced at the dearest known price.
	if c, known := DefaultPrices.Cost(Response{Model: "claude-next", OutputTokens: 1e6}); known || !near(c, 75) {
		t.Fatalf("unknown model %v %v", c, known)
	}
	u := Usage{}.Add(Response{Model: "claude-next", OutputTokens: 1}, DefaultPrices).Add(Response{Model: "claude-haiku-4-5", InputTokens: 10}, DefaultPrices)
	if u.Requests != 2 || u.UnpricedModels != 1 || u.InputTokens != 10 || u.OutputTokens != 1 {
		t.Fatalf("usage %+v", u)
	}
	if !OverBudget(1, 1) || OverBudget(0.99, 1) || OverBudget(100, 0) {
		t.Fatal("OverBudget")
	}
}

func TestParsePrices(t *testing.T) {
	p, err := ParsePrices(" claude-next=2/10 , claude-haiku-4=0.5/2.5", DefaultPrices)
	if err != nil || p["claude-next"] != (Price{2, 10}) || p["claude-haiku-4"] != (Price{0.5, 2.5}) || DefaultPrices["claude-haiku-4"] != (Price{1, 5}) {
		t.Fatalf("%v %v", p, err)
	}
	if got, _ := ParsePrices(p.String(), nil); got.String() != p.String() {
		t.Fatalf("String does not read back: %s", p)
	}
	for _, bad := range []string{"x", "x=1", "x=1/", "=1/2", "x=-1/2", "x=a/b", "x=1/99999"} {
		if _, err := ParsePrices(bad, nil); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzSSEMeter(f *testing.F) {
	f.Add([]byte(stream), 3)
	f.Add([]byte("data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":-5}}\n"), 1)
	f.Fuzz(func(t *testing.T, data []byte, chunk int) {
		if chunk <= 0 {
			chunk = 1
		}
		var m SSEMeter
		for i := 0; i < len(data); i += chunk {
			_, _ = m.Write(data[i:min(i+chunk, len(data))])
		}
		r, _ := m.Response()
		if r.InputTokens < 0 || r.OutputTokens < 0 || r.CacheCreationInputTokens < 0 || r.CacheReadInputTokens < 0 {
			t.Fatalf("negative counts %+v", r)
		}
	})
}

func FuzzParseSpec(f *testing.F) {
	f.Add("api.anthropic.com", "x-api-key", "", "")
	f.Add("api.openai.com", "Authorization: Bearer {}", "", "")
	f.Fuzz(func(t *testing.T, host, header, format, env string) {
		s, err := ParseSpec(host, header, format, env)
		if err != nil {
			return
		}
		v := s.Value("SECRET")
		if strings.ContainsAny(v, "\r\n\x00") || !strings.Contains(v, "SECRET") || hopHeaders[s.Header] || !isToken(s.Header) {
			t.Fatalf("spec %+v gives value %q", s, v)
		}
	})
}
