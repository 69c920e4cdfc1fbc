// Package specfuzz generates requests from openapi.yaml and judges the
// answers against it: valid requests made from each operation's schemas,
// and invalid ones (wrong types, missing required members, strings and
// numbers past their limits, empty strings, unknown members and query
// parameters, malformed JSON). The end-to-end spec fuzz test sends them to
// the real server; Judge says whether an answer breaks the contract.
package specfuzz

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"regexp/syntax"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
)

// Operation is one method on one path of the spec.
type Operation struct {
	Method, Path string
	Op           *openapi3.Operation
	Item         *openapi3.PathItem
}

// Name is the operation's id, or its method and path.
func (o Operation) Name() string {
	if o.Op.OperationID != "" {
		return o.Op.OperationID
	}
	return o.Method + " " + o.Path
}

// Operations lists every operation of doc, sorted by path then method, so
// that an index names the same operation in every run.
func Operations(doc *openapi3.T) []Operation {
	var ops []Operation
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			ops = append(ops, Operation{Method: method, Path: path, Op: op, Item: item})
		}
	}
	sort.Slice(ops, func(i, j int) bool {
		if ops[i].Path != ops[j].Path {
			return ops[i].Path < ops[j].Path
		}
		return ops[i].Method < ops[j].Method
	})
	return ops
}

// Case is one generated request.
type Case struct {
	Op Operation
	// Kind is "valid" or what was broken ("too_long query path", …);
	// whether the request really is valid is for Judge to say.
	Kind        string
	PathParams  map[string]string
	Query       url.Values
	Header      http.Header
	Body        []byte
	HasBody     bool
	ContentType string
}

// URL is the case's path and query, escaped.
func (c Case) URL() string {
	p := c.Op.Path
	for name, v := range c.PathParams {
		p = strings.ReplaceAll(p, "{"+name+"}", url.PathEscape(v))
	}
	if q := c.Query.Encode(); q != "" {
		p += "?" + q
	}
	return p
}

// Generator makes cases. Values overrides the valid value of a parameter
// or body member by name (known agent ids, safe commands, file paths in a
// scratch directory): the test decides what a valid request may touch. A
// key "path:name" (or "query:", "header:") is for that parameter only, and
// wins over "name", and "<operationId>:name" over both. Not for use by
// two goroutines at once.
type Generator struct {
	Values map[string]func(r *rand.Rand) any
	// Bodies overrides the valid body of a media type that is not JSON
	// (a tar archive that is one).
	Bodies map[string]func(r *rand.Rand) []byte
	op     string // the operation Cases is making requests of
}

// override is the Values entry for the first key that has one.
func (g *Generator) override(keys ...string) func(*rand.Rand) any {
	for _, k := range keys {
		if f := g.Values[g.op+":"+k]; f != nil {
			return f
		}
	}
	for _, k := range keys {
		if f := g.Values[k]; f != nil {
			return f
		}
	}
	return nil
}

// Cases returns every mutation of op (each from a fresh valid request) and
// valid requests, all from r.
func (g *Generator) Cases(op Operation, r *rand.Rand, valid int) []Case {
	g.op = op.Name()
	var out []Case
	for range valid {
		out = append(out, g.valid(op, r, r.IntN(2) == 0))
	}
	for _, m := range g.mutations(op) {
		c := g.valid(op, r, true)
		if m.apply(&c, r) {
			c.Kind = m.kind
			out = append(out, c)
		}
	}
	return out
}

// params lists op's parameters, the path item's first (the operation's
// own win by name and place).
func params(op Operation) []*openapi3.Parameter {
	seen := map[string]bool{}
	var out []*openapi3.Parameter
	for _, list := range []openapi3.Parameters{op.Op.Parameters, op.Item.Parameters} {
		for _, ref := range list {
			p := ref.Value
			if key := p.In + " " + p.Name; !seen[key] {
				seen[key] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// body is op's request body media type and schema: JSON first.
func body(op Operation) (string, *openapi3.Schema) {
	if op.Op.RequestBody == nil || op.Op.RequestBody.Value == nil {
		return "", nil
	}
	content := op.Op.RequestBody.Value.Content
	if mt := content.Get("application/json"); mt != nil && mt.Schema != nil {
		return "application/json", mt.Schema.Value
	}
	types := make([]string, 0, len(content))
	for t := range content {
		types = append(types, t)
	}
	sort.Strings(types)
	for _, t := range types {
		if mt := content[t]; mt.Schema != nil {
			return t, mt.Schema.Value
		}
	}
	return "", nil
}

func (g *Generator) valid(op Operation, r *rand.Rand, full bool) Case {
	c := Case{Op: op, Kind: "valid", PathParams: map[string]string{}, Query: url.Values{}, Header: http.Header{}}
	for _, p := range params(op) {
		if !p.Required && !full && r.IntN(2) == 0 {
			continue
		}
		if !p.Required && r.IntN(3) == 0 {
			continue
		}
		v := g.paramValue(p, r)
		switch p.In {
		case openapi3.ParameterInPath:
			c.PathParams[p.Name] = v[0]
		case openapi3.ParameterInQuery:
			c.Query[p.Name] = v
		case openapi3.ParameterInHeader:
			c.Header.Set(p.Name, v[0])
		}
	}
	ct, s := body(op)
	if s != nil {
		c.HasBody = true
		c.ContentType = ct
		switch {
		case g.Bodies[ct] != nil:
			c.Body = g.Bodies[ct](r)
		case ct == "application/json":
			c.Body = mustJSON(g.value(s, r, full, "", 0))
		case s.Type.Is(openapi3.TypeString) && s.Format == "binary":
			b := make([]byte, 1+r.IntN(64))
			for i := range b {
				b[i] = allBytes[r.IntN(len(allBytes))]
			}
			c.Body = b
		default:
			c.Body = []byte(randString(r, 1, 40))
		}
	}
	return c
}

func (g *Generator) paramValue(p *openapi3.Parameter, r *rand.Rand) []string {
	if f := g.override(p.In+":"+p.Name, p.Name); f != nil {
		return []string{fmt.Sprint(f(r))}
	}
	s := p.Schema.Value
	if s.Type.Is(openapi3.TypeArray) {
		n := r.IntN(3)
		out := make([]string, 0, n)
		for range n {
			out = append(out, scalarString(g.value(s.Items.Value, r, true, "", 1)))
		}
		if len(out) == 0 {
			out = append(out, scalarString(g.value(s.Items.Value, r, true, "", 1)))
		}
		return out
	}
	v := scalarString(g.value(s, r, true, "", 1))
	if p.In == openapi3.ParameterInPath && (v == "." || v == "..") {
		v = "x" + v // a dot segment is no path parameter: the server answers 404 for the path
	}
	return []string{v}
}

func scalarString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	default:
		return fmt.Sprint(v)
	}
}

// value makes a value valid for s; name is the member it is for.
func (g *Generator) value(s *openapi3.Schema, r *rand.Rand, full bool, name string, depth int) any {
	if name != "" {
		if f := g.override(name); f != nil {
			return f(r)
		}
	}
	if len(s.Enum) > 0 {
		return s.Enum[r.IntN(len(s.Enum))]
	}
	switch {
	case s.Type.Is(openapi3.TypeString):
		return stringValue(s, r)
	case s.Type.Is(openapi3.TypeInteger):
		lo, hi := bounds(s, 0, 100)
		if hi-lo > 1<<40 {
			hi = lo + 1<<40
		}
		switch r.IntN(4) {
		case 0:
			return int64(lo)
		case 1:
			return int64(hi)
		}
		return int64(lo) + r.Int64N(int64(hi-lo)+1)
	case s.Type.Is(openapi3.TypeNumber):
		lo, hi := bounds(s, 0, 100)
		return lo + r.Float64()*(hi-lo)
	case s.Type.Is(openapi3.TypeBoolean):
		return r.IntN(2) == 0
	case s.Type.Is(openapi3.TypeArray):
		n := r.IntN(3)
		if s.MaxItems != nil {
			n = min(n, small(*s.MaxItems))
		}
		n = max(n, small(s.MinItems))
		out := make([]any, 0, n)
		for range n {
			out = append(out, g.value(s.Items.Value, r, full, "", depth+1))
		}
		return out
	case s.Type.Is(openapi3.TypeObject) || len(s.Properties) > 0:
		obj := map[string]any{}
		if depth > 4 {
			return obj
		}
		req := map[string]bool{}
		for _, n := range s.Required {
			req[n] = true
		}
		for _, n := range sortedProps(s) {
			if !req[n] && (!full || r.IntN(3) == 0) && r.IntN(2) == 0 {
				continue
			}
			obj[n] = g.value(s.Properties[n].Value, r, full, n, depth+1)
		}
		if ap := s.AdditionalProperties.Schema; ap != nil && len(s.Properties) == 0 {
			for range r.IntN(3) {
				obj[randKey(r)] = g.value(ap.Value, r, full, "", depth+1)
			}
		}
		if s.MaxProps != nil && uint64(len(obj)) > *s.MaxProps {
			for _, n := range sortedKeys(obj)[*s.MaxProps:] {
				delete(obj, n)
			}
		}
		for _, n := range sortedProps(s) {
			if uint64(len(obj)) >= s.MinProps {
				break
			}
			if _, ok := obj[n]; !ok {
				obj[n] = g.value(s.Properties[n].Value, r, full, n, depth+1)
			}
		}
		return obj
	default:
		return randString(r, 1, 8)
	}
}

func bounds(s *openapi3.Schema, lo, hi float64) (float64, float64) {
	if s.Min != nil {
		lo = *s.Min
		if hi < lo {
			hi = lo + 100
		}
	}
	if s.Max != nil {
		hi = *s.Max
		if lo > hi {
			lo = hi - 100
		}
	}
	if s.ExclusiveMin.IsTrue() {
		lo++
	}
	if s.ExclusiveMax.IsTrue() {
		hi--
	}
	return lo, hi
}

func stringValue(s *openapi3.Schema, r *rand.Rand) string {
	switch s.Format {
	case "byte":
		b := make([]byte, r.IntN(16))
		for i := range b {
			b[i] = allBytes[r.IntN(len(allBytes))]
		}
		return base64.StdEncoding.EncodeToString(b)
	case "date-time":
		return time.Unix(r.Int64N(2e9), 0).UTC().Format(time.RFC3339)
	}
	lo := small(s.MinLength)
	hi := lo + 12
	if s.MaxLength != nil {
		hi = min(hi, small(*s.MaxLength))
	}
	if s.Pattern != "" {
		re := regexp.MustCompile(s.Pattern)
		for range 50 {
			v := fromPattern(s.Pattern, r)
			if re.MatchString(v) && len(v) >= lo && (s.MaxLength == nil || uint64(len(v)) <= *s.MaxLength) {
				return v
			}
		}
		if ex, ok := s.Example.(string); ok {
			return ex
		}
		panic(fmt.Sprintf("specfuzz: no string of pattern %q: give the schema an example", s.Pattern))
	}
	return randString(r, lo, hi)
}

// alphabet is what generated strings are made of: printable, some of it
// needing escapes in URLs and JSON, and some of it not ASCII.
var alphabet = []rune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~ %+&=\"'é✓")

func randString(r *rand.Rand, lo, hi int) string {
	n := lo
	if hi > lo {
		n += r.IntN(hi - lo + 1)
	}
	var b strings.Builder
	for b.Len() < n {
		c := alphabet[r.IntN(len(alphabet))]
		if b.Len()+len(string(c)) > n {
			c = 'a'
		}
		b.WriteRune(c)
	}
	return b.String()
}

func randKey(r *rand.Rand) string {
	const letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ_"
	b := make([]byte, 1+r.IntN(8))
	for i := range b {
		b[i] = letters[r.IntN(len(letters))]
	}
	return string(b)
}

// fromPattern makes a random string the regular expression may match.
func fromPattern(pattern string, r *rand.Rand) string {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		panic(fmt.Sprintf("specfuzz: pattern %q: %v", pattern, err))
	}
	var b strings.Builder
	walk(re.Simplify(), r, &b)
	return b.String()
}

func walk(re *syntax.Regexp, r *rand.Rand, b *strings.Builder) {
	switch re.Op {
	case syntax.OpLiteral:
		b.WriteString(string(re.Rune))
	case syntax.OpCharClass:
		// Pairs of ranges; prefer printable ASCII.
		var picks []rune
		for i := 0; i+1 < len(re.Rune); i += 2 {
			for c := max(re.Rune[i], ' '); c <= re.Rune[i+1] && c < 0x7f; c++ {
				picks = append(picks, c)
			}
		}
		if len(picks) == 0 {
			picks = []rune{re.Rune[0]}
		}
		b.WriteRune(picks[r.IntN(len(picks))])
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		b.WriteRune(alphabet[r.IntN(len(alphabet))])
	case syntax.OpCapture:
		walk(re.Sub[0], r, b)
	case syntax.OpConcat:
		for _, s := range re.Sub {
			walk(s, r, b)
		}
	case syntax.OpAlternate:
		walk(re.Sub[r.IntN(len(re.Sub))], r, b)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		lo, hi := re.Min, re.Max
		switch re.Op {
		case syntax.OpStar:
			lo, hi = 0, 8
		case syntax.OpPlus:
			lo, hi = 1, 8
		case syntax.OpQuest:
			lo, hi = 0, 1
		}
		if hi < 0 || hi > lo+8 {
			hi = lo + 8
		}
		for range lo + r.IntN(hi-lo+1) {
			walk(re.Sub[0], r, b)
		}
	}
}

func sortedProps(s *openapi3.Schema) []string {
	out := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// small is a schema's count as an int; no limit in the spec comes near
// the cap.
func small(u uint64) int {
	if u > 1<<30 {
		return 1 << 30
	}
	return int(u)
}

// allBytes is every byte value, for binary bodies.
var allBytes = func() []byte {
	b := make([]byte, 0, 256)
	for c := range 256 {
		b = append(b, byte(c))
	}
	return b
}()

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
