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
	return t.t.RenderValues(vals)
}

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
