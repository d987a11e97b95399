package grammar_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/jitllm/jitllm/runtime/grammar"
	"github.com/jitllm/jitllm/runtime/tokenizer"
	"github.com/jitllm/jitllm/runtime/weights"
)

func stories(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	src, err := weights.Open("../../testdata/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	tok, err := tokenizer.FromMeta(src.Meta())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestMatch(t *testing.T) {
	cases := []struct {
		schema string
		good   []string
		bad    []string
	}{
		{`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string","maxLength":3}},"required":["a"],"additionalProperties":false}`,
			[]string{`{"a":1}`, `{"a": -12, "b": "xyz"}`, "{\n  \"a\": 0,\n  \"b\": \"\"\n}"},
			[]string{`{}`, `{"b":"x","a":1}`, `{"a":01}`, `{"a":1,"b":"wxyz"}`, `{"a":1,}`, `{"a":1.5}`, `{"a":1} `}},
		{`{"enum":["red","green",3,null]}`, []string{`"red"`, `3`, `null`}, []string{`"blue"`, `"Red"`}},
		{`{"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2}`,
			[]string{`[true]`, `[ false, true ]`}, []string{`[]`, `[true,true,true]`, `[1]`}},
		{`{"anyOf":[{"type":"null"},{"type":"number"}]}`, []string{`null`, `1.5e3`, `-0.25`}, []string{`"x"`, `1.`, `.5`}},
		{`{"type":"string","minLength":2,"maxLength":2}`, []string{`"ab"`, `"é\n"`, `"\u00e9x"`}, []string{`"a"`, `"abc"`, "\"a\x01\""}},
		{`{"type":"object"}`, []string{`{}`, `{"x":[1,{"y":null}],"z":"w"}`}, []string{`[]`, `{"x"}`}},
		{`{"$defs":{"node":{"type":"object","properties":{"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["next"]}},"$ref":"#/$defs/node"}`,
			[]string{`{"next":null}`, `{"next":{"next":{"next":null}}}`}, []string{`{"next":{}}`}},
		{`{"const":{"k":[1,"two"]}}`, []string{`{"k":[1,"two"]}`}, []string{`{"k":[1]}`}},
		{`{"prefixItems":[{"type":"integer","minimum":1,"maximum":3},{"type":"string"}],"items":false}`,
			[]string{`[]`, `[2]`, `[3, "x"]`}, []string{`[0]`, `["x"]`, `[1,"x",2]`, `[1,2]`}},
		{`{"type":"array","prefixItems":[{"type":"null"}],"items":{"type":"boolean"},"minItems":2,"maxItems":3}`,
			[]string{`[null,true]`, `[null,false,true]`}, []string{`[null]`, `[true,true]`, `[null,true,true,true]`}},
		{`{"type":"array","items":false}`, []string{`[]`}, []string{`[1]`}},
		{`{"oneOf":[{"type":"string","maxLength":1},{"type":"integer","minimum":0,"maximum":9},{"const":null}]}`,
			[]string{`"a"`, `7`, `null`}, []string{`"ab"`, `10`, `true`}},
		{`{"type":"object","allOf":[{"properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}},"required":["b"]},{"properties":{"a":{"type":"integer"}},"maxLength":3}]}`,
			[]string{`{"a":1,"b":"x"}`}, []string{`{"a":1}`, `{"b":"x"}`, `{"b":"x","a":1}`}},
		{`{"allOf":[{"type":["integer","string"],"minimum":2},{"type":"number","maximum":4},{"maximum":3}]}`,
			[]string{`2`, `3`}, []string{`1`, `4`, `"x"`, `2.5`}},
		{`{"type":"object","properties":{"a":{},"b":{},"c":{}},"required":["b"],"additionalProperties":false,"minProperties":2,"maxProperties":2}`,
			[]string{`{"a":1,"b":2}`, `{"b":2,"c":3}`}, []string{`{"b":2}`, `{"a":1,"b":2,"c":3}`, `{"a":1,"c":3}`}},
		{`{"properties":{"a":{},"b":{}},"additionalProperties":false,"maxProperties":1}`,
			[]string{`{}`, `{"a":1}`, `{"b":1}`}, []string{`{"a":1,"b":2}`}},
		{`{"type":["string","null"]}`, []string{`"x"`, `null`}, []string{`1`}},
		{`{"type":"object","properties":{"a":{"type":"null"}},"additionalProperties":{"type":"integer"}}`,
			[]string{`{}`, `{"a":null}`, `{"a":null,"q":3}`, `{"q":3}`}, []string{`{"q":"x"}`}},
	}
	for _, c := range cases {
		g, err := grammar.CompileSchema([]byte(c.schema))
		if err != nil {
			t.Fatalf("%s: %v", c.schema, err)
		}
		for _, s := range c.good {
			if !g.Match([]byte(s)) {
				t.Errorf("%s: %q should match", c.schema, s)
			}
		}
		for _, s := range c.bad {
			if g.Match([]byte(s)) {
				t.Errorf("%s: %q should not match", c.schema, s)
			}
		}
	}
}

func TestRefusals(t *testing.T) {
	for schema, want := range map[string]string{
		`{"type":"string","pattern":"(a)\\1"}`:                                                     `unsupported: backreference \1`,
		`{"type":"string","pattern":"a(?=b)"}`:                                                     `unsupported: lookaround`,
		`{"type":"string","pattern":"a(?<!b)"}`:                                                    `unsupported: lookaround`,
		`{"type":"string","pattern":"\\bword"}`:                                                    `unsupported: word boundary`,
		`{"type":"string","pattern":"\\p{L}"}`:                                                     `unsupported: Unicode property escape`,
		`{"type":"string","pattern":"(?i)a"}`:                                                      `unsupported: group flags`,
		`{"type":"string","pattern":"a^b"}`:                                                        `unsupported: anchor ^`,
		`{"type":"string","pattern":"^a|b$"}`:                                                      `an anchor beside a top-level |`,
		`{"type":"string","pattern":"(a*)*"}`:                                                      `can match the empty string`,
		`{"type":"string","pattern":"[a-é]"}`:                                                      `range reaching past ASCII`,
		`{"type":"string","pattern":"a{2,1}"}`:                                                     `bad repetition`,
		`{"type":"string","pattern":"a{5000}"}`:                                                    `over 1000`,
		`{"type":"string","pattern":"(ab"}`:                                                        `unclosed (`,
		`{"type":"string","pattern":"a","maxLength":3}`:                                            `pattern beside minLength`,
		`{"type":"object","properties":{"x":{"minimum":3}}}`:                                       `/properties/x: unsupported: numeric bounds on type number`,
		`{"type":"integer","minimum":5,"exclusiveMaximum":5}`:                                      `no integer satisfies the bounds`,
		`{"type":"integer","minimum":1e17}`:                                                        `no integer satisfies the bounds`,
		`{"type":"integer","maximum":"3"}`:                                                         `maximum must be a number`,
		`{"prefixItems":[{}],"items":false,"minItems":2}`:                                          `exceeds the 1 prefixItems`,
		`{"prefixItems":[]}`:                                                                       `prefixItems must be a non-empty array`,
		`{"oneOf":[{"type":"string"},{"type":"string","maxLength":2}]}`:                            `oneOf branches 0 and 1 may both match`,
		`{"oneOf":[{"type":"integer"},{"type":"number"}]}`:                                         `oneOf branches 0 and 1 may both match`,
		`{"oneOf":[{"enum":["a",1]},{"type":"integer"}]}`:                                          `oneOf branches 0 and 1 may both match`,
		`{"oneOf":[{"const":1},{"const":1.0}]}`:                                                    `oneOf branches 0 and 1 may both match`,
		`{"oneOf":[{"type":"string"},{"properties":{}}]}`:                                          `oneOf branches 0 and 1 may both match`,
		`{"allOf":[{"type":"string"},{"type":"integer"}]}`:                                         `the types have nothing in common`,
		`{"allOf":[{"properties":{"a":{"type":"string"}}},{"properties":{"a":{}}}]}`:               `two different schemas`,
		`{"allOf":[{"items":{"type":"string"}},{"items":{}}]}`:                                     `allOf branches set "items" differently`,
		`{"allOf":[{"$ref":"#/$defs/x"}],"$defs":{"x":{}}}`:                                        `$ref inside allOf`,
		`{"allOf":[{"properties":{"a":{}},"additionalProperties":false},{"properties":{"b":{}}}]}`: `additionalProperties in allOf`,
		`{"allOf":[{"enum":[1,2]},{"enum":[3]}]}`:                                                  `no value in common`,
		`{"type":"strin"}`:                                                                         `unknown type "strin"`,
		`{"type":"object","required":["q"],"properties":{}}`:                                       `required property "q"`,
		`{"$ref":"http://example.com/s.json"}`:                                                     `only local references`,
		`{"$ref":"#/$defs/missing"}`:                                                               `does not resolve`,
		`{"type":"array","maxItems":1,"minItems":2}`:                                               `maxItems 1 < minItems 2`,
		`{"type":"string","maxLength":-1}`:                                                         `non-negative integer`,
		`false`:                                                                                    `matches nothing`,
		`{"type":"string","maxLength":100000000}`:                                                  `too large`,
		`{"anyOf":[{"type":"string"}],"type":"string"}`:                                            `beside anyOf`,
		`{"type":"object","properties":{"a":{"type":"array","items":[{}]}}}`:                       `items as an array`,
		`{"type":`: `not valid JSON`,
	} {
		_, err := grammar.CompileSchema([]byte(schema))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", schema, err, want)
		}
	}
}

// randomSchema makes a small schema from the supported subset.
func randomSchema(r *rand.Rand, depth int) map[string]any {
	kinds := []string{"string", "integer", "number", "boolean", "null", "enum", "const", "intRange"}
	if depth < 3 {
		kinds = append(kinds, "object", "object", "array", "anyOf", "free", "tuple", "oneOf", "allOf")
	}
	switch k := kinds[r.IntN(len(kinds))]; k {
	case "string":
		s := map[string]any{"type": "string"}
		if r.IntN(2) == 0 {
			lo := r.IntN(3)
			s["minLength"], s["maxLength"] = lo, lo+r.IntN(5)
		}
		return s
	case "enum":
		return map[string]any{"enum": []any{"a", 2, nil, "a\"b", []any{1}}[:1+r.IntN(5)]}
	case "const":
		return map[string]any{"const": map[string]any{"k": "v\\"}}
	case "object":
		props := map[string]any{}
		var req []string
		for i := range 1 + r.IntN(3) {
			name := fmt.Sprintf("p%d", i)
			props[name] = randomSchema(r, depth+1)
			if r.IntN(2) == 0 {
				req = append(req, name)
			}
		}
		s := map[string]any{"type": "object", "properties": props, "additionalProperties": r.IntN(3) == 0}
		if req != nil {
			s["required"] = req
		}
		if !s["additionalProperties"].(bool) && r.IntN(2) == 0 {
			lo := r.IntN(len(props) + 1)
			s["minProperties"], s["maxProperties"] = lo, max(lo, len(req))+r.IntN(2)
		}
		return s
	case "array":
		lo := r.IntN(2)
		return map[string]any{"type": "array", "items": randomSchema(r, depth+1), "minItems": lo, "maxItems": lo + r.IntN(3)}
	case "anyOf":
		return map[string]any{"anyOf": []any{randomSchema(r, depth+1), randomSchema(r, depth+1)}}
	case "free":
		return map[string]any{"type": "object"}
	case "oneOf": // branches of distinct types, so disjoint
		mk := []func() map[string]any{
			func() map[string]any { return map[string]any{"type": "string", "minLength": 0, "maxLength": 3} },
			func() map[string]any { return map[string]any{"type": "boolean"} },
			func() map[string]any { return map[string]any{"enum": []any{nil}} },
			func() map[string]any { return map[string]any{"type": "integer", "minimum": -20, "maximum": r.IntN(30)} },
			func() map[string]any {
				return map[string]any{"type": "array", "items": randomSchema(r, depth+1), "minItems": 0, "maxItems": 2}
			},
		}
		p := r.Perm(len(mk))
		return map[string]any{"oneOf": []any{mk[p[0]](), mk[p[1]](), mk[p[2]]()}}
	case "allOf":
		var br []any
		for j := range 1 + r.IntN(3) {
			name := fmt.Sprintf("a%d", j)
			b := map[string]any{"properties": map[string]any{name: randomSchema(r, depth+1)}}
			if r.IntN(2) == 0 {
				b["required"] = []string{name}
			}
			br = append(br, b)
		}
		return map[string]any{"type": "object", "allOf": br}
	case "tuple":
		var pre []any
		for range 1 + r.IntN(3) {
			pre = append(pre, randomSchema(r, depth+1))
		}
		s := map[string]any{"type": "array", "prefixItems": pre}
		lo := r.IntN(len(pre) + 1)
		s["minItems"] = lo
		switch r.IntN(3) {
		case 0:
			s["items"] = false
			s["maxItems"] = lo + r.IntN(len(pre)-lo+1)
		case 1:
			s["items"] = randomSchema(r, depth+1)
			s["maxItems"] = lo + r.IntN(len(pre)+2)
		default:
			s["maxItems"] = lo + r.IntN(len(pre)+2) // later items are free
		}
		return s
	case "intRange":
		lo := r.IntN(3000) - 1500
		return map[string]any{"type": "integer", "minimum": lo, "maximum": lo + r.IntN(400)}
	}
	return map[string]any{"type": kinds[0:5][r.IntN(5)]}
}

// walk generates with the constraint, choosing tokens at random (closing
// and ending tokens once the text is long), and returns the text.
func walk(t *testing.T, c *grammar.Constraint, tok *tokenizer.Tokenizer, r *rand.Rand, logits []float32, maxSteps int) (string, bool) {
	var out []byte
	for step := 0; step < maxSteps; step++ {
		for i := range logits {
			logits[i] = 0
		}
		if err := c.Mask(logits); err != nil {
			t.Fatalf("mask after %q: %v", out, err)
		}
		var allowed []int32
		var closing []int32
		for i, x := range logits {
			if !math.IsInf(float64(x), -1) {
				allowed = append(allowed, int32(i))
				p := tok.Piece(int32(i))
				if tok.IsEOG(int32(i)) || len(p) == 1 && strings.ContainsRune(`"}]0el`, rune(p[0])) {
					closing = append(closing, int32(i))
				}
			}
		}
		pick := allowed
		if step > maxSteps/4 && len(closing) > 0 {
			pick = closing
		}
		id := pick[r.IntN(len(pick))]
		if err := c.Accept(id); err != nil {
			t.Fatalf("accept %d after %q: %v", id, out, err)
		}
		out = append(out, tok.Piece(id)...)
		if c.Done() {
			return string(out), true
		}
	}
	return string(out), false
}

// Random schemas: whatever the constraint lets through, on the real
// stories260K vocabulary, validates against the schema (checked by an
// independent validator), and the mask equals a token-by-token check.
func TestRandomSchemasValidate(t *testing.T) {
	tok := stories(t)
	v := grammar.NewVocab(tok)
	r := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, tok.VocabSize()+3) // padded output
	done := 0
	n := 300
	if testing.Short() {
		n = 60
	}
	for i := 0; i < n; i++ {
		sch := randomSchema(r, 0)
		raw, _ := json.Marshal(sch)
		g, err := grammar.CompileSchema(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		var doc any
		json.Unmarshal(raw, &doc)
		comp := jsonschema.NewCompiler()
		if err := comp.AddResource("s.json", doc); err != nil {
			t.Fatal(err)
		}
		vs, err := comp.Compile("s.json")
		if err != nil {
			t.Fatal(err)
		}
		c := grammar.NewConstraint(g, v)
		text, ok := walk(t, c, tok, r, logits, 200)
		if !ok {
			continue
		}
		done++
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err != nil {
			t.Fatalf("schema %s: output %q is not JSON: %v", raw, text, err)
		}
		if err := vs.Validate(inst); err != nil {
			t.Fatalf("schema %s: output %q does not validate: %v", raw, text, err)
		}
	}
	if done < n/2 {
		t.Errorf("only %d of %d walks completed", done, n)
	}
}

// The trie walk gives exactly the tokens a piece-by-piece check allows.
func TestMaskMatchesBruteForce(t *testing.T) {
	tok := stories(t)
	v := grammar.NewVocab(tok)
	schema := `{"type":"object","properties":{"name":{"type":"string","maxLength":6},"n":{"type":"array","items":{"type":"integer"},"maxItems":3}},"required":["name","n"]}`
	g, err := grammar.CompileSchema([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := grammar.NewConstraint(g, v)
	r := rand.New(rand.NewPCG(3, 4))
	var text []byte
	for step := 0; step < 60 && !c.Done(); step++ {
		bits := c.Allowed()
		var allowed []int32
		for id := int32(0); int(id) < tok.VocabSize(); id++ {
			want := false
			if tok.IsEOG(id) {
				want = g.Match(text)
			} else if p := tok.Piece(id); len(p) > 0 {
				m := grammar.NewMatcher(g)
				want = m.Feed(append(append([]byte(nil), text...), p...)) == nil
			}
			got := bits[id/64]&(1<<(id%64)) != 0
			if got != want {
				t.Fatalf("after %q token %d %q: mask %v, check %v", text, id, tok.Piece(id), got, want)
			}
			if got {
				allowed = append(allowed, id)
			}
		}
		id := allowed[r.IntN(len(allowed))]
		if err := c.Accept(id); err != nil {
			t.Fatal(err)
		}
		text = append(text, tok.Piece(id)...)
	}
	// A token the mask refuses is refused by Accept too.
	c = grammar.NewConstraint(g, v)
	if err := c.Accept(pieceID(t, tok, "]")); err == nil {
		t.Error("Accept took a token the grammar refuses")
	}
}

// The steady state allocates nothing: masking a state already seen and
// accepting tokens along a string.
func TestMaskAllocs(t *testing.T) {
	tok := stories(t)
	v := grammar.NewVocab(tok)
	g, err := grammar.CompileSchema([]byte(`{"type":"object","properties":{"s":{"type":"string"}},"required":["s"]}`))
	if err != nil {
		t.Fatal(err)
	}
	c := grammar.NewConstraint(g, v)
	logits := make([]float32, tok.VocabSize())
	for _, b := range []byte(`{"s":"once`) {
		if err := c.Accept(pieceID(t, tok, string(b))); err != nil {
			t.Fatal(err)
		}
	}
	a := pieceID(t, tok, "a")
	c.Mask(logits)
	allocs := testing.AllocsPerRun(100, func() {
		if err := c.Mask(logits); err != nil {
			t.Fatal(err)
		}
		if err := c.Accept(a); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per masked step", allocs)
	}
}

// pieceID is the token whose piece is exactly s.
func pieceID(t testing.TB, tok *tokenizer.Tokenizer, s string) int32 {
	for id := int32(0); int(id) < tok.VocabSize(); id++ {
		if string(tok.Piece(id)) == s {
			return id
		}
	}
	t.Fatalf("no token %q", s)
	return -1
}

func gunzip(t testing.TB, path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		t.Skipf("no %s: %v", path, err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Masking a 151k vocabulary (Qwen3) takes milliseconds for a new state
// and microseconds for one seen before; figures in docs/perf/current.md.
func TestMaskLargeVocab(t *testing.T) {
	if testing.Short() {
		t.Skip("loads a 151k-token vocabulary")
	}
	tok, err := tokenizer.FromHFJSON(gunzip(t, "../../testdata/tokenizers/qwen3.tokenizer.json.gz"), gunzip(t, "../../testdata/tokenizers/qwen3.tokenizer_config.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	v := grammar.NewVocab(tok)
	build := time.Since(t0)
	g, err := grammar.CompileSchema([]byte(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city","days"]}`))
	if err != nil {
		t.Fatal(err)
	}
	c := grammar.NewConstraint(g, v)
	logits := make([]float32, tok.VocabSize())
	text := `{"city": "Paris`
	var first, again, structural time.Duration
	for i, b := range []byte(text) {
		ids, _ := tok.Encode(string(b), false, false)
		clear(logits)
		t0 := time.Now()
		if err := c.Mask(logits); err != nil {
			t.Fatal(err)
		}
		d := time.Since(t0)
		if i == 0 {
			structural = d
		}
		first = max(first, d)
		if err := c.Accept(ids[0]); err != nil {
			t.Fatalf("%q: %v", text[:i+1], err)
		}
	}
	clear(logits)
	t0 = time.Now()
	c.Mask(logits)
	again = time.Since(t0)
	n := 0
	for _, x := range logits {
		if !math.IsInf(float64(x), -1) {
			n++
		}
	}
	if n < tok.VocabSize()/2 {
		t.Errorf("inside a string only %d of %d tokens allowed", n, tok.VocabSize())
	}
	t.Logf("vocab %d: trie build %v; mask: start of object %v, slowest step %v, cached %v; %d allowed",
		tok.VocabSize(), build, structural, first, again, n)
	if !bytes.Equal([]byte(text[:1]), []byte("{")) {
		t.Fatal("unreachable")
	}
}

func FuzzSchemaCompile(f *testing.F) {
	f.Add([]byte(`{"type":"object","properties":{"a":{"type":"string"}}}`), []byte(`{"a":"x"}`))
	f.Add([]byte(`{"anyOf":[{"type":"integer"},{"enum":[1,"x"]}]}`), []byte(`1`))
	f.Add([]byte(`{"type":"integer","minimum":-7,"exclusiveMaximum":120}`), []byte(`-3`))
	f.Add([]byte(`{"prefixItems":[{"type":"string","pattern":"^a+$"}],"items":false}`), []byte(`["aa"]`))
	f.Add([]byte(`{"oneOf":[{"type":"null"},{"const":"x"}]}`), []byte(`"x"`))
	f.Add([]byte(`{"allOf":[{"properties":{"a":{}}},{"required":["a"]}],"additionalProperties":false,"maxProperties":1}`), []byte(`{"a":1}`))
	f.Fuzz(func(t *testing.T, schema, text []byte) {
		if len(schema) > 4096 || len(text) > 4096 {
			return
		}
		g, err := grammar.CompileSchema(schema)
		if err != nil {
			return
		}
		if !g.Match(text) {
			return
		}
		// A match is valid JSON.
		if !json.Valid(text) {
			t.Fatalf("schema %s matched invalid JSON %q", schema, text)
		}
	})
}

// instance makes a random value valid against a randomSchema schema, keys
// in the schema's (sorted) order, as JSON text.
func instance(r *rand.Rand, s map[string]any) string {
	if e, ok := s["enum"].([]any); ok {
		b, _ := json.Marshal(e[r.IntN(len(e))])
		return string(b)
	}
	if c, ok := s["const"]; ok {
		b, _ := json.Marshal(c)
		return string(b)
	}
	if a, ok := s["anyOf"].([]any); ok {
		return instance(r, a[r.IntN(len(a))].(map[string]any))
	}
	if a, ok := s["oneOf"].([]any); ok {
		return instance(r, a[r.IntN(len(a))].(map[string]any))
	}
	if a, ok := s["allOf"].([]any); ok {
		props, req := map[string]any{}, []string{}
		for _, b := range a {
			b := b.(map[string]any)
			maps.Copy(props, b["properties"].(map[string]any))
			rq, _ := b["required"].([]string)
			req = append(req, rq...)
		}
		return instance(r, map[string]any{"type": "object", "properties": props, "required": req})
	}
	switch s["type"] {
	case "string":
		lo, hi := 0, 6
		if v, ok := s["minLength"].(int); ok {
			lo, hi = v, s["maxLength"].(int)
		}
		n := lo + r.IntN(hi-lo+1)
		var b strings.Builder
		for range n {
			b.WriteByte("ab\"\\é\n"[r.IntN(6)])
		}
		out, _ := json.Marshal(strings.ToValidUTF8(b.String(), "x"))
		if len([]rune(strings.ToValidUTF8(b.String(), "x"))) != n {
			out, _ = json.Marshal(strings.Repeat("a", n))
		}
		return string(out)
	case "integer":
		if lo, ok := s["minimum"].(int); ok {
			return fmt.Sprint(lo + r.IntN(s["maximum"].(int)-lo+1))
		}
		return fmt.Sprint(r.IntN(2000) - 1000)
	case "number":
		return fmt.Sprintf("%.3f", r.Float64()*100-50)
	case "boolean":
		return []string{"true", "false"}[r.IntN(2)]
	case "null":
		return "null"
	case "array":
		lo, hi := s["minItems"].(int), s["maxItems"].(int)
		n := lo + r.IntN(hi-lo+1)
		pre, _ := s["prefixItems"].([]any)
		var parts []string
		for i := range n {
			if i < len(pre) {
				parts = append(parts, instance(r, pre[i].(map[string]any)))
			} else if it, ok := s["items"].(map[string]any); ok {
				parts = append(parts, instance(r, it))
			} else {
				parts = append(parts, `{"free": [1]}`)
			}
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case "object":
		props, _ := s["properties"].(map[string]any)
		req := map[string]bool{}
		if rs, ok := s["required"].([]string); ok {
			for _, k := range rs {
				req[k] = true
			}
		}
		keys := make([]string, 0, len(props))
		for k := range props {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var parts []string
		if lo, ok := s["minProperties"].(int); ok {
			// Required keys, then optional ones up to a count in range.
			hi := min(s["maxProperties"].(int), len(keys))
			want := max(lo, len(req))
			want += r.IntN(hi - want + 1)
			use := map[string]bool{}
			for k := range req {
				use[k] = true
			}
			for _, i := range r.Perm(len(keys)) {
				if len(use) < want {
					use[keys[i]] = true
				}
			}
			for _, k := range keys {
				if use[k] {
					kj, _ := json.Marshal(k)
					parts = append(parts, string(kj)+": "+instance(r, props[k].(map[string]any)))
				}
			}
			return "{" + strings.Join(parts, ", ") + "}"
		}
		for _, k := range keys {
			if req[k] || r.IntN(2) == 0 {
				kj, _ := json.Marshal(k)
				parts = append(parts, string(kj)+": "+instance(r, props[k].(map[string]any)))
			}
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return "null"
}

// Completeness: random valid instances of random schemas match.
func TestRandomInstancesMatch(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for i := 0; i < 500; i++ {
		sch := randomSchema(r, 0)
		raw, _ := json.Marshal(sch)
		g, err := grammar.CompileSchema(raw)
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 5; j++ {
			text := instance(r, sch)
			if !json.Valid([]byte(text)) {
				t.Fatalf("bad instance %q", text)
			}
			if !g.Match([]byte(text)) {
				t.Fatalf("schema %s refuses the valid %q", raw, text)
			}
		}
	}
}

// Integer bounds: the automaton accepts exactly the integers in range,
// for random bounds of every kind (inclusive, exclusive, fractional).
func TestIntegerBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	bound := func() (string, float64) {
		switch r.IntN(3) {
		case 0:
			v := r.IntN(2400) - 1200
			return fmt.Sprint(v), float64(v)
		case 1:
			v := float64(r.IntN(24000)-12000) / 10
			return strconv.FormatFloat(v, 'f', -1, 64), v
		}
		p, sign := r.IntN(6), 1-2*r.IntN(2)
		return fmt.Sprintf("%de%d", sign, p), float64(sign) * math.Pow(10, float64(p))
	}
	for i := 0; i < 300; i++ {
		s := map[string]string{}
		lo, hi := math.Inf(-1), math.Inf(1)
		loX, hiX := false, false
		if r.IntN(4) != 0 {
			k := []string{"minimum", "exclusiveMinimum"}[r.IntN(2)]
			txt, v := bound()
			s[k], lo, loX = txt, v, k == "exclusiveMinimum"
		}
		if r.IntN(4) != 0 {
			k := []string{"maximum", "exclusiveMaximum"}[r.IntN(2)]
			txt, v := bound()
			s[k], hi, hiX = txt, v, k == "exclusiveMaximum"
		}
		raw := `{"type":"integer"`
		for _, k := range []string{"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"} {
			if v, ok := s[k]; ok {
				raw += fmt.Sprintf(",%q:%s", k, v)
			}
		}
		raw += "}"
		in := func(x float64) bool {
			return (x > lo || !loX && x == lo) && (x < hi || !hiX && x == hi)
		}
		g, err := grammar.CompileSchema([]byte(raw))
		empty := true
		for x := -130000; x <= 130000; x++ {
			if in(float64(x)) {
				empty = false
				break
			}
		}
		if err != nil {
			if empty && strings.Contains(err.Error(), "no integer satisfies") {
				continue
			}
			t.Fatalf("%s: %v", raw, err)
		}
		for x := -1300; x <= 1300; x++ {
			if got := g.Match([]byte(strconv.Itoa(x))); got != in(float64(x)) {
				t.Fatalf("%s: Match(%d) = %v", raw, x, got)
			}
		}
		for _, x := range []int{99999, 100000, 100001, -99999, -100000, -100001, 1000000} {
			if got := g.Match([]byte(strconv.Itoa(x))); got != in(float64(x)) {
				t.Fatalf("%s: Match(%d) = %v", raw, x, got)
			}
		}
		for _, bad := range []string{"-0", "007", "1.0", "+1", "01", "1e2"} {
			if len(s) == 0 && bad == "-0" {
				continue // the unbounded rule keeps JSON's -0
			}
			if g.Match([]byte(bad)) {
				t.Fatalf("%s matches %q", raw, bad)
			}
		}
	}
	// Open sides reach the digit cap.
	g, err := grammar.CompileSchema([]byte(`{"type":"integer","minimum":-5}`))
	if err != nil {
		t.Fatal(err)
	}
	if !g.Match([]byte("9999999999999999")) || g.Match([]byte("10000000000000000")) || g.Match([]byte("-6")) || !g.Match([]byte("-5")) {
		t.Error("minimum -5: wrong acceptance at the edges")
	}
}
