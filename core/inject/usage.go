package inject

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Usage is what a model API's responses said they used.
type Usage struct {
	Requests                 int64
	InputTokens              int64
	OutputTokens             int64
	CacheCreationInputTokens int64
	CacheReadInputTokens     int64
	// CostUSD is the sum of each response's cost at Prices.
	CostUSD float64
	// BytesSent and BytesReceived are the request and response bodies'
	// bytes carried to and from the hosts.
	BytesSent, BytesReceived int64
	// UnpricedModels counts responses of a model the table does not know
	// (priced as the dearest known one, so a budget still holds).
	UnpricedModels int64
}

// Add returns u with one response's usage added.
func (u Usage) Add(r Response, prices Prices) Usage {
	u.Requests++
	u.InputTokens += r.InputTokens
	u.OutputTokens += r.OutputTokens
	u.CacheCreationInputTokens += r.CacheCreationInputTokens
	u.CacheReadInputTokens += r.CacheReadInputTokens
	cost, known := prices.Cost(r)
	u.CostUSD += cost
	if !known && r.tokens() > 0 {
		u.UnpricedModels++
	}
	return u
}

// Response is one model response's usage, as the Anthropic Messages API
// reports it (a JSON body's "usage", or a stream's message_start and
// message_delta events).
type Response struct {
	Model                    string
	InputTokens              int64
	OutputTokens             int64
	CacheCreationInputTokens int64
	CacheReadInputTokens     int64
}

func (r Response) tokens() int64 {
	return r.InputTokens + r.OutputTokens + r.CacheCreationInputTokens + r.CacheReadInputTokens
}

type wireUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
}

// merge takes the counts w states; a stream's later events restate them
// cumulatively, so the last stated value wins.
func (r *Response) merge(w *wireUsage) {
	if w == nil {
		return
	}
	set := func(dst *int64, v *int64) {
		if v != nil && *v >= 0 {
			*dst = *v
		}
	}
	set(&r.InputTokens, w.InputTokens)
	set(&r.OutputTokens, w.OutputTokens)
	set(&r.CacheCreationInputTokens, w.CacheCreationInputTokens)
	set(&r.CacheReadInputTokens, w.CacheReadInputTokens)
}

// FromJSON reads a (non-streamed) Messages API response body; ok is false
// when it holds no usage.
func FromJSON(body []byte) (r Response, ok bool) {
	var v struct {
		Model string     `json:"model"`
		Usage *wireUsage `json:"usage"`
	}
	if json.Unmarshal(body, &v) != nil || v.Usage == nil {
		return Response{}, false
	}
	r.Model = v.Model
	r.merge(v.Usage)
	return r, true
}

// maxEventLine bounds the line an SSEMeter keeps while it waits for its
// end; a longer line is skipped (usage events are small).
const maxEventLine = 1 << 20

// SSEMeter reads a streamed Messages API response as it passes, chunk by
// chunk, and keeps its usage. It never holds more than one line.
type SSEMeter struct {
	line     []byte
	skipping bool
	resp     Response
	seen     bool
}

// Write takes the next bytes of the stream; it never fails.
func (m *SSEMeter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			m.keep(p)
			break
		}
		m.keep(p[:i])
		if !m.skipping {
			m.event(bytes.TrimSuffix(m.line, []byte{'\r'}))
		}
		m.line, m.skipping = m.line[:0], false
		p = p[i+1:]
	}
	return n, nil
}

func (m *SSEMeter) keep(p []byte) {
	if m.skipping {
		return
	}
	if len(m.line)+len(p) > maxEventLine {
		m.skipping, m.line = true, m.line[:0]
		return
	}
	m.line = append(m.line, p...)
}

func (m *SSEMeter) event(line []byte) {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	var v struct {
		Type    string `json:"type"`
		Message *struct {
			Model string     `json:"model"`
			Usage *wireUsage `json:"usage"`
		} `json:"message"`
		Usage *wireUsage `json:"usage"`
	}
	if json.Unmarshal(bytes.TrimSpace(data), &v) != nil {
		return
	}
	switch v.Type {
	case "message_start":
		if v.Message != nil {
			m.resp.Model = v.Message.Model
			m.resp.merge(v.Message.Usage)
			m.seen = true
		}
	case "message_delta":
		m.resp.merge(v.Usage)
		m.seen = true
	}
}

// Response is the usage read so far; ok is false when the stream held none.
func (m *SSEMeter) Response() (Response, bool) { return m.resp, m.seen }

// Price is what a model costs, in US dollars per million tokens. Cache
// writes cost 1.25× and cache reads 0.1× the input price.
type Price struct {
	InputPerMTok, OutputPerMTok float64
}

// Prices maps a model name prefix to its price; the longest prefix that
// matches a response's model wins.
type Prices map[string]Price

// DefaultPrices are Anthropic's list prices at the time of writing; an
// operator overrides them with AGENTIC_MODEL_PRICES (ParsePrices).
var DefaultPrices = Prices{
	"claude-opus-4-5":   {5, 25},
	"claude-opus-4":     {15, 75},
	"claude-3-opus":     {15, 75},
	"claude-sonnet-4":   {3, 15},
	"claude-3-7-sonnet": {3, 15},
	"claude-3-5-sonnet": {3, 15},
	"claude-haiku-4":    {1, 5},
	"claude-3-5-haiku":  {0.8, 4},
	"claude-3-haiku":    {0.25, 1.25},
}

// Cost is what r cost; known is false when no prefix matched, and r is
// then priced at the dearest price in the table.
func (p Prices) Cost(r Response) (usd float64, known bool) {
	price, known := p.lookup(r.Model)
	in := price.InputPerMTok / 1e6
	return float64(r.InputTokens)*in +
		float64(r.CacheCreationInputTokens)*in*1.25 +
		float64(r.CacheReadInputTokens)*in*0.1 +
		float64(r.OutputTokens)*price.OutputPerMTok/1e6, known
}

func (p Prices) lookup(model string) (Price, bool) {
	best, bestLen := Price{}, -1
	for prefix, price := range p {
		if strings.HasPrefix(model, prefix) && len(prefix) > bestLen {
			best, bestLen = price, len(prefix)
		}
	}
	if bestLen >= 0 {
		return best, true
	}
	for _, price := range p {
		if price.OutputPerMTok > best.OutputPerMTok {
			best = price
		}
	}
	return best, false
}

// ParsePrices reads "model-prefix=input/output,…" (dollars per million
// tokens) over base: AGENTIC_MODEL_PRICES.
func ParsePrices(s string, base Prices) (Prices, error) {
	out := Prices{}
	for k, v := range base {
		out[k] = v
	}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		model, pair, ok := strings.Cut(item, "=")
		in, outp, ok2 := strings.Cut(pair, "/")
		a, err1 := strconv.ParseFloat(strings.TrimSpace(in), 64)
		b, err2 := strconv.ParseFloat(strings.TrimSpace(outp), 64)
		model = strings.TrimSpace(model)
		if !ok || !ok2 || model == "" || err1 != nil || err2 != nil || a < 0 || b < 0 || a > 1e4 || b > 1e4 {
			return nil, fmt.Errorf("model price %q: want model-prefix=input/output in dollars per million tokens", item)
		}
		out[model] = Price{a, b}
	}
	return out, nil
}

// String lists the table, for the server's banner and docs.
func (p Prices) String() string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%g/%g", k, p[k].InputPerMTok, p[k].OutputPerMTok)
	}
	return b.String()
}

// OverBudget tells whether spent reaches a budget (0: none).
func OverBudget(spentUSD, maxUSD float64) bool { return maxUSD > 0 && spentUSD >= maxUSD }
