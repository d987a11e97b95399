package template

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// maxJSONIndent is the widest indent tojson takes: real templates use 2
// or 4.
const maxJSONIndent = 1024

// tojson is __jl_tojson(value, indent=N, separators=..., sort_keys=...):
// Python's json.dumps with ensure_ascii=False, keeping dict insertion
// order unless sort_keys.
var tojson = jinja.NewCallable("__jl_tojson", func(args []jinja.Value, kw map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	indent := ""
	if v, ok := kw["indent"]; ok {
		switch {
		case v.IsInt():
			// Python's " " * N: nothing below 1; bounded above, as the
			// template is input (a model file's) and each line repeats it
			n := v.AsInt()
			if n > maxJSONIndent {
				return jinja.Undefined(), fmt.Errorf("tojson: indent %d is over %d", n, maxJSONIndent)
			}
			indent = strings.Repeat(" ", int(max(n, 0)))
		case v.IsString():
			indent = v.AsString()
		}
	}
	itemSep, keySep := ",", ": "
	if v, ok := kw["separators"]; ok && v.IsList() && v.AsList().Len() == 2 {
		itemSep, keySep = v.AsList().Items[0].AsString(), v.AsList().Items[1].AsString()
	}
	sortKeys := false
	if v, ok := kw["sort_keys"]; ok {
		sortKeys = v.IsTruthy()
	}
	var b strings.Builder
	if err := dumps(&b, args[0], indent, itemSep, keySep, sortKeys, 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(b.String()), nil
})

func dumps(b *strings.Builder, v jinja.Value, indent, itemSep, keySep string, sortKeys bool, depth int) error {
	nl := func(d int) {
		b.WriteByte('\n')
		for i := 0; i < d; i++ {
			b.WriteString(indent)
		}
	}
	switch {
	case v.IsNone(), v.IsUndefined(), v.IsCallable():
		b.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		f := v.AsFloat()
		switch {
		case math.IsNaN(f):
			b.WriteString("NaN")
		case math.IsInf(f, 1):
			b.WriteString("Infinity")
		case math.IsInf(f, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(pyFloat(f))
		}
	case v.IsString():
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v.AsString()); err != nil {
			return err
		}
		b.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				b.WriteString(itemSep)
			}
			nl(depth + 1)
			if err := dumps(b, it, indent, itemSep, keySep, sortKeys, depth+1); err != nil {
				return err
			}
		}
		nl(depth)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		keys := d.OrderedKeys()
		if sortKeys {
			sort.Strings(keys)
		}
		if len(keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(itemSep)
			}
			nl(depth + 1)
			if err := dumps(b, jinja.NewString(k), indent, itemSep, keySep, sortKeys, depth+1); err != nil {
				return err
			}
			b.WriteString(keySep)
			val, _ := d.Get(k)
			if err := dumps(b, val, indent, itemSep, keySep, sortKeys, depth+1); err != nil {
				return err
			}
		}
		nl(depth)
		b.WriteByte('}')
	default:
		return fmt.Errorf("tojson: cannot encode %v", v)
	}
	return nil
}

// pyFloat formats f as Python's repr does.
func pyFloat(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e16 {
		return strconv.FormatFloat(f, 'f', 1, 64)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
