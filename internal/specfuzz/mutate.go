package specfuzz

import (
	"encoding/json"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// mutation breaks (or, for at_max, stretches) one thing of a valid case;
// apply reports whether it applied.
type mutation struct {
	kind  string
	apply func(c *Case, r *rand.Rand) bool
}

func (g *Generator) mutations(op Operation) []mutation {
	var out []mutation
	for _, p := range params(op) {
		out = append(out, paramMutations(p)...)
	}
	out = append(out, mutation{"unknown_query_parameter", func(c *Case, _ *rand.Rand) bool {
		c.Query.Set("zz_unknown", "1")
		return true
	}})
	ct, s := body(op)
	if s == nil {
		return out
	}
	out = append(out, mutation{"empty_body", func(c *Case, _ *rand.Rand) bool {
		c.Body = nil
		return true
	}})
	if ct != "application/json" {
		return out
	}
	for _, raw := range []struct{ kind, body string }{
		{"malformed_json", `{"`}, {"not_an_object", `[]`}, {"null_body", `null`}, {"a_string_body", `"x"`},
	} {
		out = append(out, mutation{raw.kind, func(c *Case, _ *rand.Rand) bool {
			c.Body = []byte(raw.body)
			return true
		}})
	}
	out = append(out, mutation{"trailing_data", func(c *Case, _ *rand.Rand) bool {
		c.Body = append(c.Body, []byte(`{}`)...)
		return true
	}})
	out = append(out, mutation{"too_large", func(c *Case, _ *rand.Rand) bool {
		c.Body = []byte(`{"zz_padding":"` + strings.Repeat("a", 1<<20) + `"}`)
		return true
	}})
	out = append(out, bodyMutations(s, nil, 0)...)
	return out
}

func paramMutations(p *openapi3.Parameter) []mutation {
	s := p.Schema.Value
	at := p.In + " " + p.Name
	set := func(c *Case, v string) {
		switch p.In {
		case openapi3.ParameterInPath:
			c.PathParams[p.Name] = v
		case openapi3.ParameterInQuery:
			c.Query.Set(p.Name, v)
		case openapi3.ParameterInHeader:
			c.Header.Set(p.Name, v)
		}
	}
	get := func(c *Case) string {
		switch p.In {
		case openapi3.ParameterInPath:
			return c.PathParams[p.Name]
		case openapi3.ParameterInQuery:
			return c.Query.Get(p.Name)
		default:
			return c.Header.Get(p.Name)
		}
	}
	var out []mutation
	if p.Required && p.In != openapi3.ParameterInPath {
		out = append(out, mutation{"missing " + at, func(c *Case, _ *rand.Rand) bool {
			c.Query.Del(p.Name)
			c.Header.Del(p.Name)
			return true
		}})
	}
	if s.Type.Is(openapi3.TypeArray) {
		s = s.Items.Value
	}
	for _, v := range scalarMutations(s, p.In != openapi3.ParameterInPath) {
		if p.In == openapi3.ParameterInHeader && v.kind == "nul_byte" {
			continue // no HTTP client sends it
		}
		out = append(out, mutation{v.kind + " " + at, func(c *Case, r *rand.Rand) bool {
			x, ok := v.value(scalarString(get(c)), r)
			if ok && p.In == openapi3.ParameterInHeader && strings.ContainsFunc(scalarString(x), func(ch rune) bool { return ch < ' ' && ch != '\t' || ch == 0x7f }) {
				return false // no HTTP client sends a control character in a header
			}
			if ok {
				set(c, scalarString(x))
			}
			return ok
		}})
	}
	return out
}

// scalarMutation makes a value from the valid one; ok false when it cannot.
type scalarMutation struct {
	kind  string
	value func(valid any, r *rand.Rand) (any, bool)
}

func scalarMutations(s *openapi3.Schema, mayBeEmpty bool) []scalarMutation {
	var out []scalarMutation
	add := func(kind string, f func(valid any, r *rand.Rand) (any, bool)) {
		out = append(out, scalarMutation{kind, f})
	}
	switch {
	case s.Type.Is(openapi3.TypeString):
		if len(s.Enum) > 0 {
			add("not_in_enum", func(any, *rand.Rand) (any, bool) { return "zz-not-a-member", true })
		}
		if s.MaxLength != nil {
			n := small(*s.MaxLength)
			add("at_max_length", func(valid any, _ *rand.Rand) (any, bool) { return stretch(s, valid, n) })
			add("too_long", func(valid any, _ *rand.Rand) (any, bool) {
				if v, ok := stretch(s, valid, n); ok {
					return v.(string) + "a", true
				}
				return strings.Repeat("a", n+1), true
			})
		}
		if s.MaxLength == nil || *s.MaxLength > 300 {
			add("long_segment", func(valid any, _ *rand.Rand) (any, bool) {
				return scalarString(valid) + "/" + strings.Repeat("b", 256), true
			})
		}
		if mayBeEmpty {
			add("empty", func(any, *rand.Rand) (any, bool) { return "", true })
		}
		if s.Pattern != "" {
			re := regexp.MustCompile(s.Pattern)
			add("pattern_mismatch", func(any, *rand.Rand) (any, bool) {
				for _, v := range []string{"!!", "zz", " ", "a=b", "0", "-a", "\u00e9", "\x01"} {
					if !re.MatchString(v) {
						return v, true
					}
				}
				return nil, false
			})
		}
		add("nul_byte", func(valid any, _ *rand.Rand) (any, bool) { return scalarString(valid) + "\x00", true })
	case s.Type.Is(openapi3.TypeInteger), s.Type.Is(openapi3.TypeNumber):
		add("not_a_number", func(any, *rand.Rand) (any, bool) { return "abc", true })
		if s.Min != nil {
			add("below_minimum", func(any, *rand.Rand) (any, bool) { return *s.Min - 1, true })
		}
		if s.Max != nil {
			add("above_maximum", func(any, *rand.Rand) (any, bool) { return *s.Max + 1, true })
		}
		if s.Type.Is(openapi3.TypeInteger) {
			add("fraction", func(any, *rand.Rand) (any, bool) { return 1.5, true })
			add("huge", func(any, *rand.Rand) (any, bool) { return 1e30, true })
		}
	case s.Type.Is(openapi3.TypeBoolean):
		add("not_a_boolean", func(any, *rand.Rand) (any, bool) { return "maybe", true })
	}
	return out
}

// stretch makes a string of exactly n bytes from the valid one that still
// matches the schema's pattern (path-like values keep their segments short).
func stretch(s *openapi3.Schema, valid any, n int) (any, bool) {
	base := scalarString(valid)
	var re *regexp.Regexp
	if s.Pattern != "" {
		re = regexp.MustCompile(s.Pattern)
	}
	for _, fill := range []string{"a", "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "0"} {
		for _, start := range []string{base, ""} {
			v := start
			if len(v) < n {
				v += strings.Repeat(fill, (n-len(v))/len(fill)+1)
			}
			v = v[:n]
			if strings.HasSuffix(v, "/") {
				v = v[:n-1] + "a"
			}
			if re == nil || re.MatchString(v) {
				return v, true
			}
		}
	}
	return nil, false
}

// bodyMutations are the mutations of the members of object schema s at path.
func bodyMutations(s *openapi3.Schema, path []string, depth int) []mutation {
	if depth > 3 {
		return nil
	}
	var out []mutation
	at := "body /" + strings.Join(path, "/")
	out = append(out, mutation{"unknown_member " + at, func(c *Case, _ *rand.Rand) bool {
		return edit(c, append(clone(path), "zz_unknown"), func(any, bool) (any, bool) { return 1, true })
	}})
	req := map[string]bool{}
	for _, n := range s.Required {
		req[n] = true
	}
	for _, name := range sortedProps(s) {
		ps := s.Properties[name].Value
		p := append(clone(path), name)
		at := "body /" + strings.Join(p, "/")
		if req[name] {
			out = append(out, mutation{"missing " + at, func(c *Case, _ *rand.Rand) bool {
				return edit(c, p, func(any, bool) (any, bool) { return nil, false })
			}})
		}
		out = append(out, mutation{"wrong_type " + at, func(c *Case, _ *rand.Rand) bool {
			return edit(c, p, func(any, bool) (any, bool) { return wrongType(ps), true })
		}})
		if !ps.Nullable {
			out = append(out, mutation{"null " + at, func(c *Case, _ *rand.Rand) bool {
				return edit(c, p, func(any, bool) (any, bool) { return nil, true })
			}})
		}
		switch {
		case ps.Type.Is(openapi3.TypeObject) && len(ps.Properties) > 0:
			out = append(out, bodyMutations(ps, p, depth+1)...)
		case ps.Type.Is(openapi3.TypeArray) && ps.Items != nil:
			items := ps.Items.Value
			if ps.MaxItems != nil {
				out = append(out, mutation{"too_many_items " + at, func(c *Case, _ *rand.Rand) bool {
					return edit(c, p, func(any, bool) (any, bool) {
						v := make([]any, *ps.MaxItems+1)
						for i := range v {
							v[i] = "a" + strconv.Itoa(i)
						}
						return v, true
					})
				}})
			}
			for _, m := range scalarMutations(items, true) {
				out = append(out, mutation{m.kind + " " + at + "/0", func(c *Case, r *rand.Rand) bool {
					return edit(c, p, func(any, bool) (any, bool) {
						v, ok := m.value("a", r)
						return []any{v}, ok
					})
				}})
			}
		case ps.Type.Is(openapi3.TypeObject) && ps.AdditionalProperties.Schema != nil:
			for _, m := range scalarMutations(ps.AdditionalProperties.Schema.Value, true) {
				out = append(out, mutation{m.kind + " " + at + "/*", func(c *Case, r *rand.Rand) bool {
					return edit(c, p, func(any, bool) (any, bool) {
						v, ok := m.value("a", r)
						return map[string]any{"K": v}, ok
					})
				}})
			}
			out = append(out, mutation{"empty_key " + at, func(c *Case, _ *rand.Rand) bool {
				return edit(c, p, func(any, bool) (any, bool) { return map[string]any{"": "v"}, true })
			}})
		default:
			for _, m := range scalarMutations(ps, true) {
				out = append(out, mutation{m.kind + " " + at, func(c *Case, r *rand.Rand) bool {
					return edit(c, p, func(old any, had bool) (any, bool) {
						if !had {
							old = "a"
						}
						return m.value(old, r)
					})
				}})
			}
		}
	}
	return out
}

func wrongType(s *openapi3.Schema) any {
	switch {
	case s.Type.Is(openapi3.TypeString):
		return 12345
	case s.Type.Is(openapi3.TypeInteger), s.Type.Is(openapi3.TypeNumber):
		return "12"
	case s.Type.Is(openapi3.TypeBoolean):
		return "true"
	case s.Type.Is(openapi3.TypeArray):
		return map[string]any{"a": 1}
	case s.Type.Is(openapi3.TypeObject):
		return []any{1}
	default:
		return nil
	}
}

// edit changes the JSON body at path: f gets the old value and whether
// there was one, and returns the new one, or false to delete it. Parents
// missing on the way are made as empty objects.
func edit(c *Case, path []string, f func(old any, had bool) (any, bool)) bool {
	var root any
	if err := json.Unmarshal(c.Body, &root); err != nil {
		return false
	}
	obj, ok := root.(map[string]any)
	if !ok {
		return false
	}
	for _, name := range path[:len(path)-1] {
		next, ok := obj[name].(map[string]any)
		if !ok {
			next = map[string]any{}
			obj[name] = next
		}
		obj = next
	}
	last := path[len(path)-1]
	old, had := obj[last]
	if v, keep := f(old, had); keep {
		obj[last] = v
	} else {
		delete(obj, last)
	}
	c.Body = mustJSON(root)
	return true
}

func clone(p []string) []string { return append([]string(nil), p...) }
