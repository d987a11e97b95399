// Package template renders a model's chat template (the Jinja source in the
// GGUF metadata key tokenizer.chat_template) the way Hugging Face's
// apply_chat_template does, on top of github.com/ardanlabs/jinja.
//
// The wrapper keeps what the library alone would lose:
//
//   - Inputs are passed as ordered dicts: JSON objects keep their key order
//     (a map[string]any would be sorted), so tojson and dict iteration see
//     keys as the client sent them.
//   - Jinja2 (keep_trailing_newline=False) drops exactly one newline at the
//     end of the template source; the library differs, so Compile applies
//     the Jinja2 rule to the source itself.
//   - tojson(indent=N) in the library goes through encoding/json, which
//     sorts keys and escapes <, > and &; Compile rewrites those filter calls
//     to an order-preserving encoder with Python's json.dumps layout.
//   - The string filter prints Python's str() (repr of nested strings, None,
//     True/False, float layout); calls with *args or **kwargs are spread by
//     the wrapper, as the library does not parse them (see rewrite.go).
package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Template is a compiled chat template, safe for concurrent use.
type Template struct {
	src string
	t   *jinja.Template
}

// Compile parses a chat template.
func Compile(src string) (*Template, error) {
	s := src
	// Jinja2's default keep_trailing_newline=False: the lexer drops one
	// trailing newline of the source.
	if strings.HasSuffix(s, "\r\n") {
		s = s[:len(s)-2]
	} else if strings.HasSuffix(s, "\n") {
		s = s[:len(s)-1]
	}
	t, err := jinja.Compile(rewriteSource(s))
	if err != nil {
		return nil, err
	}
	return &Template{src: src, t: t}, nil
}

// Source is the template text as given.
func (t *Template) Source() string { return t.src }

// Render renders the template with vars, a JSON object whose key order is
// kept at every level.
func (t *Template) Render(vars []byte) (string, error) {
	v, err := ParseJSON(vars)
	if err != nil {
		return "", err
	}
	if !v.IsDict() {
		return "", errors.New("template: variables must be a JSON object")
	}
	d := v.AsDict()
	data := make(map[string]jinja.Value, d.Len())
	for _, k := range d.Keys {
		data[k] = d.Data[k]
	}
	return t.RenderValues(data)
}

// RenderValues renders the template with already converted values.
func (t *Template) RenderValues(data map[string]jinja.Value) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("template: render panicked: %v", r)
		}
	}()
	vals := make(map[string]jinja.Value, len(data)+3)
	for k, v := range data {
		vals[k] = v
	}
	vals["__jl_tojson"] = tojson
	vals["__jl_string"] = pyString
	vals["__jl_call"] = starCall
	depth := 0 // the macros in progress (rewrite.go's guards)
	vals["__jl_enter"] = jinja.NewCallable("__jl_enter", func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		if depth++; depth > maxMacroDepth {
			return jinja.Undefined(), fmt.Errorf("template: macros nest deeper than %d", maxMacroDepth)
		}
		return jinja.FromGoValue(depth), nil
	})
	vals["__jl_leave"] = jinja.NewCallable("__jl_leave", func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		depth--
		return jinja.FromGoValue(depth), nil
	})
	steps := 0 // loop iterations (rewrite.go's ticks)
	vals["__jl_step"] = jinja.NewCallable("__jl_step", func([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
		if steps++; steps > maxIterations {
			return jinja.Undefined(), fmt.Errorf("template: more than %d loop iterations", maxIterations)
		}
		return jinja.Undefined(), nil
	})
	vals["range"] = boundedRange
	return t.t.RenderValues(vals)
}

// maxRange is the most items range() makes for a template: Jinja2's
// sandbox's MAX_RANGE, which Hugging Face renders templates in
// (range(10**9) would run the render for minutes; the user's names shadow
// the library's builtins).
const maxRange = 100000

// boundedRange is the library's range (Python's: stop; start, stop;
// start, stop, step) refusing more than maxRange items.
var boundedRange = jinja.NewCallable("range", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) < 1 || len(args) > 3 {
		return jinja.Undefined(), fmt.Errorf("range: expected 1-3 arguments, got %d", len(args))
	}
	n := make([]int64, len(args))
	for i, a := range args {
		n[i] = rangeInt(a)
	}
	start, stop, step := int64(0), n[0], int64(1)
	if len(n) > 1 {
		start, stop = n[0], n[1]
	}
	if len(n) > 2 {
		step = n[2]
	}
	if step == 0 {
		return jinja.Undefined(), errors.New("range: step must not be zero")
	}
	var count uint64 // ⌈span/|step|⌉ in uint64: start and stop may be an int64 apart
	span, by := uint64(0), uint64(step)
	switch {
	case step > 0 && stop > start:
		span = uint64(stop - start)
	case step < 0 && start > stop:
		span, by = uint64(start-stop), -uint64(step)
	}
	if count = span / by; span%by != 0 {
		count++
	}
	if count > maxRange {
		return jinja.Undefined(), fmt.Errorf("template: range of %d items (at most %d)", count, maxRange)
	}
	items := make([]jinja.Value, 0, count)
	for i, v := uint64(0), start; i < count; i, v = i+1, v+step {
		items = append(items, jinja.NewInt(v))
	}
	return jinja.NewList(items), nil
})

// rangeInt is a range argument as the library reads it: ints, floats
// truncated, bools 0 or 1, strings' leading integer, else 0.
func rangeInt(v jinja.Value) int64 {
	switch {
	case v.IsInt():
		return v.AsInt()
	case v.IsFloat():
		return int64(v.AsFloat())
	case v.IsBool():
		if v.AsBool() {
			return 1
		}
	case v.IsString():
		var n int64
		fmt.Sscanf(v.AsString(), "%d", &n)
		return n
	}
	return 0
}

// maxIterations bounds the loop iterations of one render: real templates
// loop over messages, their parts and tools' properties.
const maxIterations = 1 << 20

// maxMacroDepth is how deeply a template's macros may nest: real templates
// recurse over a tool schema's nesting, a few levels.
const maxMacroDepth = 256

// ParseJSON converts JSON text to a jinja value, keeping object key order
// and telling integers from floats as Python's json module does.
func ParseJSON(b []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := parseValue(dec)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("template: trailing data after JSON value")
	}
	return v, nil
}

func parseValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				k, ok := kt.(string)
				if !ok {
					return jinja.Undefined(), fmt.Errorf("template: object key %v", kt)
				}
				v, err := parseValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(k, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return d, nil
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := parseValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return jinja.NewList(items), nil
		}
	case json.Number:
		return jinja.FromGoValue(x), nil
	case string:
		return jinja.NewString(x), nil
	case bool:
		return jinja.NewBool(x), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Undefined(), fmt.Errorf("template: unexpected JSON token %v", tok)
}
