package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// SchemaError is a schema the compiler refuses; Path names the place
// (JSON-pointer-like, "" for the root).
type SchemaError struct {
	Path string
	Msg  string
}

func (e *SchemaError) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// jv is a JSON value that keeps object key order (properties are
// generated in the order the schema lists them).
type jv struct {
	kind byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null
	keys []string
	vals []*jv
	arr  []*jv
	str  string // string, or the number's text
	b    bool
}

func (v *jv) get(k string) *jv {
	if v == nil || v.kind != 'o' {
		return nil
	}
	for i, kk := range v.keys {
		if kk == k {
			return v.vals[i]
		}
	}
	return nil
}

const maxJSONDepth = 128

func parseJV(b []byte) (*jv, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := decodeJV(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

func decodeJV(dec *json.Decoder, depth int) (*jv, error) {
	if depth > maxJSONDepth {
		return nil, errors.New("nested too deeply")
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch x := t.(type) {
	case json.Delim:
		if x == '{' {
			v := &jv{kind: 'o'}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				e, err := decodeJV(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.keys, v.vals = append(v.keys, k), append(v.vals, e)
			}
			_, err := dec.Token()
			return v, err
		}
		v := &jv{kind: 'a'}
		for dec.More() {
			e, err := decodeJV(dec, depth+1)
			if err != nil {
				return nil, err
			}
			v.arr = append(v.arr, e)
		}
		_, err := dec.Token()
		return v, err
	case string:
		return &jv{kind: 's', str: x}, nil
	case json.Number:
		return &jv{kind: 'n', str: x.String()}, nil
	case bool:
		return &jv{kind: 'b', b: x}, nil
	}
	return &jv{kind: 'z'}, nil
}

// encode writes v as compact JSON, keys in order.
func (v *jv) encode(w *bytes.Buffer) {
	switch v.kind {
	case 'o':
		w.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				w.WriteByte(',')
			}
			writeJSONString(w, k)
			w.WriteByte(':')
			v.vals[i].encode(w)
		}
		w.WriteByte('}')
	case 'a':
		w.WriteByte('[')
		for i, e := range v.arr {
			if i > 0 {
				w.WriteByte(',')
			}
			e.encode(w)
		}
		w.WriteByte(']')
	case 's':
		writeJSONString(w, v.str)
	case 'n':
		w.WriteString(v.str)
	case 'b':
		if v.b {
			w.WriteString("true")
		} else {
			w.WriteString("false")
		}
	default:
		w.WriteString("null")
	}
}

func writeJSONString(w *bytes.Buffer, s string) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	w.Truncate(w.Len() - 1) // Encode's newline
}

// Keywords the compiler implements, and annotations it ignores.
var (
	schemaKeywords = map[string]bool{"type": true, "properties": true, "required": true, "enum": true, "const": true,
		"items": true, "additionalProperties": true, "anyOf": true, "minItems": true, "maxItems": true,
		"minLength": true, "maxLength": true, "minimum": true, "maximum": true, "exclusiveMinimum": true,
		"exclusiveMaximum": true, "prefixItems": true, "allOf": true, "oneOf": true, "minProperties": true, "maxProperties": true, "pattern": true, "$ref": true, "$defs": true, "definitions": true}
	schemaAnnotations = map[string]bool{"title": true, "description": true, "default": true, "examples": true,
		"$schema": true, "$id": true, "$comment": true, "format": true, "deprecated": true, "readOnly": true,
		"writeOnly": true}
)

// compiler turns a schema into rules.
type compiler struct {
	b     *builder
	root  *jv
	refs  map[string]int32
	cache map[string]elem // shared generic rules
}

func newCompiler(b *builder, root *jv) *compiler {
	return &compiler{b: b, root: root, refs: map[string]int32{}, cache: map[string]elem{}}
}

// CompileSchema compiles a JSON schema: the grammar matches exactly the
// JSON texts (compact, or with a little whitespace between tokens) that
// validate against it.
func CompileSchema(schema []byte) (*Grammar, error) {
	return Sequence(Schema(schema))
}

// JSONObject is a grammar of any JSON object (response_format
// json_object).
func JSONObject() *Grammar {
	g, err := Sequence(Schema([]byte(`{"type":"object"}`)))
	if err != nil {
		panic(err)
	}
	return g
}

func (c *compiler) fail(path, format string, args ...any) error {
	return &SchemaError{Path: path, Msg: fmt.Sprintf(format, args...)}
}

func (c *compiler) generic(name string, mk func() seq) elem {
	if e, ok := c.cache[name]; ok {
		return e
	}
	r := c.b.newRule()
	c.cache[name] = ref(r)
	c.b.define(r, mk())
	return ref(r)
}

// ws is the whitespace allowed between tokens: nothing, one space, or a
// newline and an indent (bounded, so a model cannot pad forever).
func (c *compiler) ws() elem {
	return c.generic("ws", func() seq {
		sp := c.b.chars(' ', ' ')
		nl := cat(seq{c.b.chars('\n', '\n')}, c.b.repeat(seq{sp}, 0, 16))
		return seq{c.b.rule(seq{}, seq{sp}, nl)}
	})
}

func (c *compiler) sep(s string) seq { return cat(seq{c.ws()}, c.b.lit(s), seq{c.ws()}) }

// char is one JSON string character: well-formed UTF-8 other than the
// quote, the backslash and controls, or an escape (no surrogate halves,
// so that lengths count code points as the schema does).
func (c *compiler) char() elem {
	return c.generic("char", func() seq {
		b := c.b
		hex := b.chars('0', '9', 'a', 'f', 'A', 'F')
		esc := b.rule(
			seq{b.chars('"', '"', '\\', '\\', '/', '/', 'b', 'b', 'f', 'f', 'n', 'n', 'r', 'r', 't', 't')},
			seq{b.chars('u', 'u'), b.chars('0', '9', 'a', 'c', 'A', 'C', 'e', 'f', 'E', 'F'), hex, hex, hex},
			seq{b.chars('u', 'u'), b.chars('d', 'd', 'D', 'D'), b.chars('0', '7'), hex, hex},
		)
		return seq{b.rule(
			seq{b.chars(0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f)},
			seq{c.nonASCII()},
			seq{b.chars('\\', '\\'), esc},
		)}
	})
}

func (c *compiler) str(lo, hi int) seq {
	q := c.b.lit(`"`)
	return cat(q, c.b.repeat(seq{c.char()}, lo, hi), q)
}

// Numbers have bounded digits so that a model cannot emit digits forever.
func (c *compiler) integer() elem {
	return c.generic("integer", func() seq {
		b := c.b
		return seq{b.opt(b.lit("-")), b.rule(b.lit("0"), cat(seq{b.chars('1', '9')}, b.repeat(seq{b.chars('0', '9')}, 0, 15)))}
	})
}

func (c *compiler) number() elem {
	return c.generic("number", func() seq {
		b := c.b
		d := seq{b.chars('0', '9')}
		frac := b.opt(cat(b.lit("."), b.repeat(d, 1, 15)))
		exp := b.opt(cat(seq{b.chars('e', 'e', 'E', 'E')}, seq{b.opt(seq{b.chars('+', '+', '-', '-')})}, b.repeat(d, 1, 2)))
		return seq{c.integer(), frac, exp}
	})
}

// anyValue is any JSON value.
func (c *compiler) anyValue() elem {
	if e, ok := c.cache["value"]; ok {
		return e
	}
	r := c.b.newRule()
	c.cache["value"] = ref(r)
	b := c.b
	c.b.define(r, seq{c.anyObject(ref(r))}, seq{c.arrayOf(seq{ref(r)}, 0, -1)}, c.str(0, -1), seq{c.number()},
		b.lit("true"), b.lit("false"), b.lit("null"))
	return ref(r)
}

// anyObject is an object whose values are val.
func (c *compiler) anyObject(val elem) elem {
	kv := cat(c.str(0, -1), c.sep(":"), seq{val})
	return c.b.rule(cat(c.b.lit("{"), seq{c.ws()}, seq{c.b.opt(cat(kv, seq{c.b.star(cat(c.sep(","), kv))}))}, seq{c.ws()}, c.b.lit("}")))
}

func (c *compiler) arrayOf(item seq, lo, hi int) elem {
	b := c.b
	open, close := cat(b.lit("["), seq{c.ws()}), cat(seq{c.ws()}, b.lit("]"))
	if hi == 0 {
		return b.rule(cat(open, close))
	}
	more := b.repeat(cat(c.sep(","), item), max(lo-1, 0), hi-1)
	if hi < 0 {
		more = b.repeat(cat(c.sep(","), item), max(lo-1, 0), -1)
	}
	body := cat(item, more)
	if lo == 0 {
		body = seq{b.opt(body)}
	}
	return b.rule(cat(open, body, close))
}

func (c *compiler) literal(v *jv) seq {
	var w bytes.Buffer
	v.encode(&w)
	return c.b.lit(w.String())
}

func intKey(s *jv, key, path string, c *compiler) (int, bool, error) {
	v := s.get(key)
	if v == nil {
		return 0, false, nil
	}
	var n int
	if v.kind != 'n' {
		return 0, false, c.fail(path+"/"+key, "%s must be a non-negative integer", key)
	}
	if _, err := fmt.Sscanf(v.str, "%d", &n); err != nil || n < 0 || strings.ContainsAny(v.str, ".eE") {
		return 0, false, c.fail(path+"/"+key, "%s must be a non-negative integer", key)
	}
	return n, true, nil
}

// value compiles schema s (at path) to a sequence.
func (c *compiler) value(s *jv, path string, depth int) (seq, error) {
	if depth > 64 {
		return nil, c.fail(path, "schema nested too deeply")
	}
	if c.b.err != nil {
		return nil, c.b.err
	}
	switch s.kind {
	case 'b':
		if !s.b {
			return nil, c.fail(path, "the schema false matches nothing")
		}
		return seq{c.anyValue()}, nil
	case 'o':
	default:
		return nil, c.fail(path, "a schema must be an object or a boolean")
	}
	for _, k := range s.keys {
		if !schemaKeywords[k] && !schemaAnnotations[k] {
			return nil, c.fail(path, "unsupported JSON Schema keyword %q", k)
		}
	}
	if s.get("allOf") != nil {
		m, err := c.mergeAllOf(s, path, depth)
		if err != nil {
			return nil, err
		}
		return c.value(m, path, depth+1)
	}
	if r := s.get("$ref"); r != nil {
		for _, k := range s.keys {
			if schemaKeywords[k] && k != "$ref" && k != "$defs" && k != "definitions" {
				return nil, c.fail(path, "unsupported: keyword %q beside $ref", k)
			}
		}
		if r.kind != 's' {
			return nil, c.fail(path+"/$ref", "$ref must be a string")
		}
		return c.ref(r.str, path, depth)
	}
	types, err := c.types(s, path)
	if err != nil {
		return nil, err
	}
	if e := s.get("const"); e != nil {
		return c.literal(e), nil
	}
	if e := s.get("enum"); e != nil {
		if e.kind != 'a' || len(e.arr) == 0 {
			return nil, c.fail(path+"/enum", "enum must be a non-empty array")
		}
		var alts []seq
		for _, x := range e.arr {
			if typeOK(x, types) {
				alts = append(alts, c.literal(x))
			}
		}
		if len(alts) == 0 {
			return nil, c.fail(path+"/enum", "no enum value has the schema's type")
		}
		return seq{c.b.rule(alts...)}, nil
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		a := s.get(kw)
		if a == nil {
			continue
		}
		for _, k := range s.keys {
			if schemaKeywords[k] && k != kw && k != "$defs" && k != "definitions" {
				return nil, c.fail(path, "unsupported: keyword %q beside %s (move it into each branch)", k, kw)
			}
		}
		if a.kind != 'a' || len(a.arr) == 0 {
			return nil, c.fail(path+"/"+kw, "%s must be a non-empty array", kw)
		}
		if kw == "oneOf" {
			if err := c.checkOneOf(a, path); err != nil {
				return nil, err
			}
		}
		var alts []seq
		for i, x := range a.arr {
			sq, err := c.value(x, fmt.Sprintf("%s/%s/%d", path, kw, i), depth+1)
			if err != nil {
				return nil, err
			}
			alts = append(alts, sq)
		}
		return seq{c.b.rule(alts...)}, nil
	}
	if types == nil {
		switch {
		case s.get("properties") != nil || s.get("required") != nil || s.get("additionalProperties") != nil ||
			s.get("minProperties") != nil || s.get("maxProperties") != nil:
			types = []string{"object"}
		case s.get("items") != nil || s.get("prefixItems") != nil || s.get("minItems") != nil || s.get("maxItems") != nil:
			types = []string{"array"}
		case s.get("minLength") != nil || s.get("maxLength") != nil || s.get("pattern") != nil:
			types = []string{"string"}
		case hasNumericBound(s):
			types = []string{"number"}
		default:
			return seq{c.anyValue()}, nil
		}
	}
	var alts []seq
	for _, t := range types {
		sq, err := c.typed(s, t, path, depth)
		if err != nil {
			return nil, err
		}
		alts = append(alts, sq)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return seq{c.b.rule(alts...)}, nil
}

func (c *compiler) types(s *jv, path string) ([]string, error) {
	t := s.get("type")
	if t == nil {
		return nil, nil
	}
	known := map[string]bool{"object": true, "array": true, "string": true, "number": true, "integer": true, "boolean": true, "null": true}
	var out []string
	switch t.kind {
	case 's':
		out = []string{t.str}
	case 'a':
		for _, x := range t.arr {
			if x.kind != 's' {
				return nil, c.fail(path+"/type", "type must be a string or an array of strings")
			}
			out = append(out, x.str)
		}
	default:
		return nil, c.fail(path+"/type", "type must be a string or an array of strings")
	}
	if len(out) == 0 {
		return nil, c.fail(path+"/type", "type is an empty array")
	}
	for _, x := range out {
		if !known[x] {
			return nil, c.fail(path+"/type", "unknown type %q", x)
		}
	}
	return out, nil
}

func typeOK(v *jv, types []string) bool {
	if types == nil {
		return true
	}
	for _, t := range types {
		switch {
		case t == "object" && v.kind == 'o', t == "array" && v.kind == 'a', t == "string" && v.kind == 's',
			t == "number" && v.kind == 'n', t == "boolean" && v.kind == 'b', t == "null" && v.kind == 'z':
			return true
		case t == "integer" && v.kind == 'n' && !strings.ContainsAny(v.str, ".eE"):
			return true
		}
	}
	return false
}

func (c *compiler) typed(s *jv, t, path string, depth int) (seq, error) {
	b := c.b
	switch t {
	case "null":
		return b.lit("null"), nil
	case "boolean":
		return seq{c.generic("boolean", func() seq { return seq{b.rule(b.lit("true"), b.lit("false"))} })}, nil
	case "integer":
		if sq, ok, err := c.boundedInteger(s, path); ok || err != nil {
			return sq, err
		}
		return seq{c.integer()}, nil
	case "number":
		if hasNumericBound(s) {
			return nil, c.fail(path, "unsupported: numeric bounds on type number (only type integer is bounded)")
		}
		return seq{c.number()}, nil
	case "string":
		if pt := s.get("pattern"); pt != nil {
			if pt.kind != 's' {
				return nil, c.fail(path+"/pattern", "pattern must be a string")
			}
			if s.get("minLength") != nil || s.get("maxLength") != nil {
				return nil, c.fail(path, "unsupported: pattern beside minLength/maxLength (put the length in the pattern)")
			}
			return c.pattern(pt.str, path)
		}
		lo, _, err := intKey(s, "minLength", path, c)
		if err != nil {
			return nil, err
		}
		hi, ok, err := intKey(s, "maxLength", path, c)
		if err != nil {
			return nil, err
		}
		if !ok {
			hi = -1
		} else if hi < lo {
			return nil, c.fail(path, "maxLength %d < minLength %d", hi, lo)
		}
		if lo == 0 && hi < 0 {
			return seq{c.generic("string", func() seq { return c.str(0, -1) })}, nil
		}
		return c.str(lo, hi), nil
	case "array":
		lo, _, err := intKey(s, "minItems", path, c)
		if err != nil {
			return nil, err
		}
		hi, ok, err := intKey(s, "maxItems", path, c)
		if err != nil {
			return nil, err
		}
		if !ok {
			hi = -1
		} else if hi < lo {
			return nil, c.fail(path, "maxItems %d < minItems %d", hi, lo)
		}
		item := seq{c.anyValue()}
		if it := s.get("items"); it != nil {
			if it.kind == 'a' {
				return nil, c.fail(path+"/items", "unsupported: items as an array (use prefixItems)")
			}
			if it.kind == 'b' && !it.b {
				item = nil // no items past prefixItems
			} else if item, err = c.value(it, path+"/items", depth+1); err != nil {
				return nil, err
			}
		}
		if pi := s.get("prefixItems"); pi != nil {
			return c.tuple(pi, item, lo, hi, path, depth)
		}
		if item == nil {
			if lo > 0 {
				return nil, c.fail(path, "items false leaves no array of minItems %d", lo)
			}
			hi = 0
		}
		return seq{c.arrayOf(item, lo, hi)}, nil
	}
	return c.object(s, path, depth)
}

func (c *compiler) object(s *jv, path string, depth int) (seq, error) {
	b := c.b
	props := s.get("properties")
	if props != nil && props.kind != 'o' {
		return nil, c.fail(path+"/properties", "properties must be an object")
	}
	required := map[string]bool{}
	if r := s.get("required"); r != nil {
		if r.kind != 'a' {
			return nil, c.fail(path+"/required", "required must be an array of strings")
		}
		for _, x := range r.arr {
			if x.kind != 's' {
				return nil, c.fail(path+"/required", "required must be an array of strings")
			}
			if props.get(x.str) == nil {
				return nil, c.fail(path+"/required", "required property %q is not in properties", x.str)
			}
			required[x.str] = true
		}
	}
	// Extra keys: only when asked for (true or a schema), or when the
	// schema lists no properties at all (then the object is free).
	var extra seq
	ap := s.get("additionalProperties")
	switch {
	case ap != nil && ap.kind == 'b' && !ap.b:
	case ap != nil:
		v, err := c.value(ap, path+"/additionalProperties", depth+1)
		if err != nil {
			return nil, err
		}
		extra = v
	case props == nil || len(props.keys) == 0:
		extra = seq{c.anyValue()}
	}
	pLo, hasLo, err := intKey(s, "minProperties", path, c)
	if err != nil {
		return nil, err
	}
	pHi, hasHi, err := intKey(s, "maxProperties", path, c)
	if err != nil {
		return nil, err
	}
	counted := hasLo && pLo > 0 || hasHi
	if counted && extra != nil {
		kw := "minProperties"
		if hasHi {
			kw = "maxProperties"
		}
		return nil, c.fail(path, "unsupported: %q with additional properties allowed (counted over the listed properties only; set additionalProperties false)", kw)
	}
	if !hasHi {
		pHi = -1
	}
	if props == nil || len(props.keys) == 0 {
		if counted && pLo > 0 {
			return nil, c.fail(path, "no object satisfies minProperties %d without properties", pLo)
		}
		if extra == nil {
			return cat(b.lit("{"), seq{c.ws()}, b.lit("}")), nil
		}
		if len(extra) == 1 && extra[0] == c.cache["value"] {
			return seq{c.generic("object", func() seq { return seq{c.anyObject(c.anyValue())} })}, nil
		}
		return seq{c.anyObject(b.rule(extra))}, nil
	}
	seen := map[string]bool{}
	kvs := make([]seq, len(props.keys))
	for i, k := range props.keys {
		if seen[k] {
			return nil, c.fail(path+"/properties", "property %q listed twice", k)
		}
		seen[k] = true
		v, err := c.value(props.vals[i], path+"/properties/"+k, depth+1)
		if err != nil {
			return nil, err
		}
		var w bytes.Buffer
		writeJSONString(&w, k)
		kvs[i] = cat(b.lit(w.String()), c.sep(":"), v)
	}
	if counted {
		return c.countedObject(props.keys, kvs, required, pLo, pHi, path)
	}
	// R(i): the rest from property i once one was written; F(i): the same
	// before any was. Built from the end.
	n := len(kvs)
	var restR, restF seq
	if extra != nil {
		kv := cat(c.str(0, -1), c.sep(":"), seq{b.rule(extra)})
		restR = seq{b.star(cat(c.sep(","), kv))}
		restF = seq{b.opt(cat(kv, restR))}
	}
	R, F := restR, restF
	for i := n - 1; i >= 0; i-- {
		name := props.keys[i]
		withR := seq{b.rule(cat(c.sep(","), kvs[i], R))}
		withF := seq{b.rule(cat(kvs[i], R))}
		if required[name] {
			R, F = withR, withF
		} else {
			R = seq{b.rule(withR, R)}
			F = seq{b.rule(withF, F)}
		}
	}
	return cat(b.lit("{"), seq{c.ws()}, F, seq{c.ws()}, b.lit("}")), nil
}

func (c *compiler) ref(r, path string, depth int) (seq, error) {
	if id, ok := c.refs[r]; ok {
		return seq{ref(id)}, nil
	}
	if !strings.HasPrefix(r, "#") {
		return nil, c.fail(path+"/$ref", "unsupported $ref %q: only local references (#/...) are resolved", r)
	}
	target := c.root
	if p := strings.TrimPrefix(r, "#"); p != "" {
		if !strings.HasPrefix(p, "/") {
			return nil, c.fail(path+"/$ref", "unsupported $ref %q", r)
		}
		for _, part := range strings.Split(p[1:], "/") {
			part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
			target = target.get(part)
			if target == nil {
				return nil, c.fail(path+"/$ref", "$ref %q does not resolve", r)
			}
		}
	}
	id := c.b.newRule()
	c.refs[r] = id
	v, err := c.value(target, r, depth+1)
	if err != nil {
		return nil, err
	}
	c.b.define(id, v)
	return seq{ref(id)}, nil
}

// Part is one piece of a grammar sequence (a tool-call syntax: markers
// around a schema's value).
type Part struct {
	lit     string
	special int32
	schema  []byte
	alts    [][]Part
	kind    byte // 'l' literal, 't' special token, 's' schema, 'c' choice, 'w' whitespace
}

// Lit matches s exactly.
func Lit(s string) Part { return Part{kind: 'l', lit: s} }

// Special matches one special token.
func Special(id int32) Part { return Part{kind: 't', special: id} }

// Schema matches a JSON value valid against schema.
func Schema(schema []byte) Part { return Part{kind: 's', schema: schema} }

// Space matches the whitespace allowed between JSON tokens.
func Space() Part { return Part{kind: 'w'} }

// Choice matches one of alternatives.
func Choice(alts ...[]Part) Part { return Part{kind: 'c', alts: alts} }

// Sequence compiles parts, one after another, into a grammar.
func Sequence(parts ...Part) (*Grammar, error) {
	b := newBuilder()
	c := newCompiler(b, nil)
	s, err := c.parts(parts)
	if err != nil {
		return nil, err
	}
	return b.build(s)
}

func (c *compiler) parts(parts []Part) (seq, error) {
	var out seq
	for _, p := range parts {
		switch p.kind {
		case 'l':
			out = append(out, c.b.lit(p.lit)...)
		case 't':
			out = append(out, c.b.special(p.special))
		case 'w':
			out = append(out, c.ws())
		case 's':
			root, err := parseJV(p.schema)
			if err != nil {
				return nil, &SchemaError{Msg: fmt.Sprintf("the schema is not valid JSON: %v", err)}
			}
			// Each schema resolves its own $refs.
			sub := &compiler{b: c.b, root: root, refs: map[string]int32{}, cache: c.cache}
			s, err := sub.value(root, "", 0)
			if err != nil {
				return nil, err
			}
			out = append(out, s...)
		case 'c':
			var alts []seq
			for _, a := range p.alts {
				s, err := c.parts(a)
				if err != nil {
					return nil, err
				}
				alts = append(alts, s)
			}
			out = append(out, c.b.rule(alts...))
		}
		if c.b.err != nil {
			return nil, c.b.err
		}
	}
	return out, nil
}

// tuple is an array whose element i matches prefixItems[i] and whose
// later elements match item (nil: none allowed), with lo..hi elements
// (hi < 0: unbounded). A tuple may stop before the prefix ends.
func (c *compiler) tuple(pi *jv, item seq, lo, hi int, path string, depth int) (seq, error) {
	b := c.b
	if pi.kind != 'a' || len(pi.arr) == 0 {
		return nil, c.fail(path+"/prefixItems", "prefixItems must be a non-empty array")
	}
	n := len(pi.arr)
	if item == nil && lo > n {
		return nil, c.fail(path, "minItems %d exceeds the %d prefixItems and items is false", lo, n)
	}
	pre := make([]seq, n)
	for i, x := range pi.arr {
		sq, err := c.value(x, fmt.Sprintf("%s/prefixItems/%d", path, i), depth+1)
		if err != nil {
			return nil, err
		}
		pre[i] = sq
	}
	// rest(i): the elements from index i on, each after a comma.
	var rest func(i int) seq
	rest = func(i int) seq {
		if hi >= 0 && i >= hi {
			return seq{}
		}
		if i >= n {
			if item == nil {
				return seq{}
			}
			top := -1
			if hi >= 0 {
				top = hi - i
			}
			return b.repeat(cat(c.sep(","), item), max(lo-i, 0), top)
		}
		part := cat(c.sep(","), pre[i], rest(i+1))
		if i >= lo {
			return seq{b.opt(part)}
		}
		return part
	}
	open, close := cat(b.lit("["), seq{c.ws()}), cat(seq{c.ws()}, b.lit("]"))
	if hi == 0 {
		return cat(open, close), nil
	}
	body := cat(pre[0], rest(1))
	if lo == 0 {
		body = seq{b.opt(body)}
	}
	return cat(open, body, close), c.b.err
}

// countedObject is an object of the listed properties only, in order,
// with lo..hi of them (hi < 0: no upper bound): node(i, k) is the rest
// from property i once k were written.
func (c *compiler) countedObject(keys []string, kvs []seq, required map[string]bool, lo, hi int, path string) (seq, error) {
	b := c.b
	n := len(kvs)
	kvr := make([]elem, n)
	for i := range kvs {
		kvr[i] = b.rule(kvs[i])
	}
	type key struct{ i, k int }
	memo := map[key]*elem{}
	var node func(i, k int) *elem
	node = func(i, k int) *elem {
		if e, ok := memo[key{i, k}]; ok {
			return e
		}
		var out *elem
		if i == n {
			if k >= lo && (hi < 0 || k <= hi) {
				e := b.rule(seq{})
				out = &e
			}
		} else {
			var alts []seq
			if hi < 0 || k < hi {
				if next := node(i+1, k+1); next != nil {
					a := seq{kvr[i], *next}
					if k > 0 {
						a = cat(c.sep(","), a)
					}
					alts = append(alts, a)
				}
			}
			if !required[keys[i]] {
				if next := node(i+1, k); next != nil {
					alts = append(alts, seq{*next})
				}
			}
			if alts != nil {
				e := b.rule(alts...)
				out = &e
			}
		}
		memo[key{i, k}] = out
		return out
	}
	root := node(0, 0)
	if b.err != nil {
		return nil, b.err
	}
	if root == nil {
		return nil, c.fail(path, "no object of the listed properties satisfies minProperties %d / maxProperties %d and required", lo, hi)
	}
	return cat(b.lit("{"), seq{c.ws()}, seq{*root}, seq{c.ws()}, b.lit("}")), nil
}
