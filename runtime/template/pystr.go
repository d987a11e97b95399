package template

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// pyString is the string filter (Compile rewrites x|string to
// x|__jl_string): Python's str(). The library's own filter prints none as
// "", floats with %g and strings inside lists and dicts unescaped in single
// quotes; Jinja2 prints what Python does.
var pyString = jinja.NewCallable("__jl_string", func(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	v := args[0]
	switch {
	case v.IsString():
		return v, nil
	case v.IsUndefined():
		return jinja.NewString(""), nil
	}
	var b strings.Builder
	pyRepr(&b, v)
	return jinja.NewString(b.String()), nil
})

// pyRepr writes Python's repr() of v.
func pyRepr(b *strings.Builder, v jinja.Value) {
	switch {
	case v.IsUndefined():
		// Jinja2's Undefined stringifies as "" (only reachable nested).
	case v.IsNone():
		b.WriteString("None")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		f := v.AsFloat()
		switch {
		case math.IsNaN(f):
			b.WriteString("nan")
		case math.IsInf(f, 1):
			b.WriteString("inf")
		case math.IsInf(f, -1):
			b.WriteString("-inf")
		default:
			b.WriteString(pyFloat(f))
		}
	case v.IsString():
		pyStrRepr(b, v.AsString())
	case v.IsList():
		b.WriteByte('[')
		for i, it := range v.AsList().Items {
			if i > 0 {
				b.WriteString(", ")
			}
			pyRepr(b, it)
		}
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		b.WriteByte('{')
		for i, k := range d.OrderedKeys() {
			if i > 0 {
				b.WriteString(", ")
			}
			pyStrRepr(b, k)
			b.WriteString(": ")
			val, _ := d.Get(k)
			pyRepr(b, val)
		}
		b.WriteByte('}')
	default:
		b.WriteString(v.String())
	}
}

// pyStrRepr writes Python's repr() of a str: single quotes unless the text
// has a single quote and no double quote, and Python's escapes for the
// quote, backslash and non-printable characters.
func pyStrRepr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == utf8.RuneError || unicode.IsPrint(r):
			// Go's IsPrint is Python's str.isprintable: letters, marks,
			// numbers, punctuation, symbols and the ASCII space.
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			fmt.Fprintf(b, `\U%08x`, r)
		}
	}
	b.WriteByte(q)
}

// starCall is __jl_call(f, spec, args...), what Compile makes of a call
// with *x or **x arguments, which the library does not parse. spec has one
// letter per argument after it: 'p' a positional argument, '*' an iterable
// whose items are positional arguments, 'k' a dict whose items are keyword
// arguments. kw holds the call's own keyword arguments.
var starCall = jinja.NewCallable("__jl_call", func(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
	if len(args) < 2 || !args[1].IsString() || len(args[1].AsString()) != len(args)-2 {
		return jinja.Undefined(), fmt.Errorf("__jl_call: malformed call")
	}
	fn, spec := args[0], args[1].AsString()
	if !fn.IsCallable() {
		return jinja.Undefined(), fmt.Errorf("%s is not callable", fn.String())
	}
	var pos []jinja.Value
	var kwargs map[string]jinja.Value
	if len(kw) > 0 {
		kwargs = make(map[string]jinja.Value, len(kw))
		for k, v := range kw {
			kwargs[k] = v
		}
	}
	for i, a := range args[2:] {
		switch spec[i] {
		case 'p':
			pos = append(pos, a)
		case '*':
			switch {
			case a.IsList():
				pos = append(pos, a.AsList().Items...)
			case a.IsString():
				for _, r := range a.AsString() {
					pos = append(pos, jinja.NewString(string(r)))
				}
			case a.IsDict():
				for _, k := range a.AsDict().OrderedKeys() {
					pos = append(pos, jinja.NewString(k))
				}
			default:
				return jinja.Undefined(), fmt.Errorf("argument after * must be an iterable, not %s", a.String())
			}
		case 'k':
			if !a.IsDict() {
				return jinja.Undefined(), fmt.Errorf("argument after ** must be a mapping, not %s", a.String())
			}
			d := a.AsDict()
			if kwargs == nil {
				kwargs = make(map[string]jinja.Value, d.Len())
			}
			for _, k := range d.OrderedKeys() {
				if _, dup := kwargs[k]; dup {
					return jinja.Undefined(), fmt.Errorf("got multiple values for keyword argument %q", k)
				}
				kwargs[k], _ = d.Get(k)
			}
		default:
			return jinja.Undefined(), fmt.Errorf("__jl_call: malformed call")
		}
	}
	return fn.AsCallable().Fn(pos, kwargs)
})
