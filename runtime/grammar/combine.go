package grammar

import (
	"bytes"
	"fmt"
	"math/big"
	"slices"
)

func (v *jv) text() string {
	var w bytes.Buffer
	v.encode(&w)
	return w.String()
}

// jsonEqual is JSON equality: numbers by value, objects by key set.
func jsonEqual(a, b *jv) bool {
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case 'n':
		x, ok1 := new(big.Rat).SetString(a.str)
		y, ok2 := new(big.Rat).SetString(b.str)
		return ok1 && ok2 && x.Cmp(y) == 0 || a.str == b.str
	case 's':
		return a.str == b.str
	case 'b':
		return a.b == b.b
	case 'z':
		return true
	case 'a':
		if len(a.arr) != len(b.arr) {
			return false
		}
		for i := range a.arr {
			if !jsonEqual(a.arr[i], b.arr[i]) {
				return false
			}
		}
		return true
	}
	if len(a.keys) != len(b.keys) {
		return false
	}
	for i, k := range a.keys {
		o := b.get(k)
		if o == nil || !jsonEqual(a.vals[i], o) {
			return false
		}
	}
	return true
}

// oneOfBranch is what a oneOf branch can validate, conservatively: a
// finite set of values (const/enum), or values of some JSON types (nil:
// any value).
type oneOfBranch struct {
	lits  []*jv
	types map[string]bool
}

func (c *compiler) branchOf(s *jv, path string) (oneOfBranch, error) {
	if s.kind != 'o' {
		return oneOfBranch{}, nil
	}
	if e := s.get("const"); e != nil {
		return oneOfBranch{lits: []*jv{e}}, nil
	}
	if e := s.get("enum"); e != nil && e.kind == 'a' && len(e.arr) > 0 {
		return oneOfBranch{lits: e.arr}, nil
	}
	ts, err := c.types(s, path)
	if err != nil || ts == nil {
		return oneOfBranch{}, err
	}
	m := map[string]bool{}
	for _, t := range ts {
		m[t] = true
	}
	return oneOfBranch{types: m}, nil
}

func kindType(v *jv) string {
	return map[byte]string{'o': "object", 'a': "array", 's': "string", 'n': "number", 'b': "boolean", 'z': "null"}[v.kind]
}

func (m oneOfBranch) allows(v *jv) bool {
	if m.types == nil {
		return true
	}
	t := kindType(v)
	return m.types[t] || t == "number" && m.types["integer"]
}

// disjoint reports that no value validates both branches.
func disjoint(a, b oneOfBranch) bool {
	switch {
	case a.lits != nil && b.lits != nil:
		for _, x := range a.lits {
			for _, y := range b.lits {
				if jsonEqual(x, y) {
					return false
				}
			}
		}
		return true
	case a.lits != nil || b.lits != nil:
		if a.lits == nil {
			a, b = b, a
		}
		for _, x := range a.lits {
			if b.allows(x) {
				return false
			}
		}
		return true
	case a.types == nil || b.types == nil:
		return false
	}
	num := func(m map[string]bool) bool { return m["number"] || m["integer"] }
	if num(a.types) && num(b.types) {
		return false
	}
	for t := range a.types {
		if t != "number" && t != "integer" && b.types[t] {
			return false
		}
	}
	return true
}

// checkOneOf accepts oneOf as anyOf when its branches are pairwise
// disjoint by type, const or enum (then exactly one branch can match).
func (c *compiler) checkOneOf(a *jv, path string) error {
	if a.kind != 'a' || len(a.arr) == 0 {
		return c.fail(path+"/oneOf", "oneOf must be a non-empty array")
	}
	bs := make([]oneOfBranch, len(a.arr))
	for i, x := range a.arr {
		var err error
		if bs[i], err = c.branchOf(x, fmt.Sprintf("%s/oneOf/%d", path, i)); err != nil {
			return err
		}
		for j := range i {
			if !disjoint(bs[j], bs[i]) {
				return c.fail(path+"/oneOf", "unsupported: oneOf branches %d and %d may both match (only branches disjoint by type, const or enum are compiled; use anyOf)", j, i)
			}
		}
	}
	return nil
}

var (
	mergeMin = map[string]bool{"minimum": true, "exclusiveMinimum": true, "minLength": true, "minItems": true, "minProperties": true}
	mergeMax = map[string]bool{"maximum": true, "exclusiveMaximum": true, "maxLength": true, "maxItems": true, "maxProperties": true}
)

// mergeAllOf folds s's allOf branches into one schema when they combine
// keyword by keyword (types intersect, required and properties unite,
// bounds tighten, anything else must agree); else it refuses.
func (c *compiler) mergeAllOf(s *jv, path string, depth int) (*jv, error) {
	if depth > 64 {
		return nil, c.fail(path, "schema nested too deeply")
	}
	a := s.get("allOf")
	if a.kind != 'a' || len(a.arr) == 0 {
		return nil, c.fail(path+"/allOf", "allOf must be a non-empty array")
	}
	out := &jv{kind: 'o'}
	objParts := 0
	add := func(part *jv, ppath string) error {
		if part.kind == 'b' {
			if !part.b {
				return c.fail(ppath, "the schema false matches nothing")
			}
			return nil
		}
		if part.kind != 'o' {
			return c.fail(ppath, "a schema must be an object or a boolean")
		}
		if part.get("properties") != nil || part.get("additionalProperties") != nil {
			objParts++
		}
		for i, k := range part.keys {
			v := part.vals[i]
			if k == "allOf" || ppath != path && (k == "$defs" || k == "definitions") {
				continue
			}
			if k == "$ref" && ppath != path {
				return c.fail(ppath, "unsupported: $ref inside allOf is not merged")
			}
			old := out.get(k)
			if old == nil {
				out.keys, out.vals = append(out.keys, k), append(out.vals, v)
				continue
			}
			m, err := c.mergeKey(k, old, v, ppath)
			if err != nil {
				return err
			}
			out.vals[slices.Index(out.keys, k)] = m
		}
		return nil
	}
	if err := add(s, path); err != nil {
		return nil, err
	}
	for i, br := range a.arr {
		bp := fmt.Sprintf("%s/allOf/%d", path, i)
		if br.kind == 'o' && br.get("allOf") != nil {
			var err error
			if br, err = c.mergeAllOf(br, bp, depth+1); err != nil {
				return nil, err
			}
		}
		if err := add(br, bp); err != nil {
			return nil, err
		}
	}
	if objParts > 1 && (out.get("additionalProperties") != nil) {
		return nil, c.fail(path+"/allOf", "unsupported: additionalProperties in allOf beside other properties (each branch would judge the others' keys)")
	}
	return out, nil
}

func (c *compiler) mergeKey(k string, old, v *jv, path string) (*jv, error) {
	switch {
	case jsonEqual(old, v):
		return old, nil
	case schemaAnnotations[k]:
		return old, nil
	case k == "type":
		return c.mergeTypes(old, v, path)
	case k == "required" && old.kind == 'a' && v.kind == 'a':
		m := &jv{kind: 'a', arr: slices.Clone(old.arr)}
		for _, x := range v.arr {
			if !slices.ContainsFunc(m.arr, func(y *jv) bool { return jsonEqual(x, y) }) {
				m.arr = append(m.arr, x)
			}
		}
		return m, nil
	case k == "properties" && old.kind == 'o' && v.kind == 'o':
		m := &jv{kind: 'o', keys: slices.Clone(old.keys), vals: slices.Clone(old.vals)}
		for i, pk := range v.keys {
			if o := m.get(pk); o != nil {
				if !jsonEqual(o, v.vals[i]) {
					return nil, c.fail(path+"/properties/"+pk, "unsupported: allOf gives property %q two different schemas", pk)
				}
				continue
			}
			m.keys, m.vals = append(m.keys, pk), append(m.vals, v.vals[i])
		}
		return m, nil
	case k == "enum" && old.kind == 'a' && v.kind == 'a':
		m := &jv{kind: 'a'}
		for _, x := range old.arr {
			if slices.ContainsFunc(v.arr, func(y *jv) bool { return jsonEqual(x, y) }) {
				m.arr = append(m.arr, x)
			}
		}
		if len(m.arr) == 0 {
			return nil, c.fail(path+"/enum", "allOf: the enums have no value in common")
		}
		return m, nil
	case (mergeMin[k] || mergeMax[k]) && old.kind == 'n' && v.kind == 'n':
		x, ok1 := new(big.Rat).SetString(old.str)
		y, ok2 := new(big.Rat).SetString(v.str)
		if !ok1 || !ok2 {
			return nil, c.fail(path+"/"+k, "%s is not a usable number", k)
		}
		if (x.Cmp(y) < 0) == mergeMin[k] {
			return v, nil
		}
		return old, nil
	}
	return nil, c.fail(path, "unsupported: allOf branches set %q differently (%s vs %s)", k, old.text(), v.text())
}

func (c *compiler) mergeTypes(a, b *jv, path string) (*jv, error) {
	ta, err := c.types(&jv{kind: 'o', keys: []string{"type"}, vals: []*jv{a}}, path)
	if err != nil {
		return nil, err
	}
	tb, err := c.types(&jv{kind: 'o', keys: []string{"type"}, vals: []*jv{b}}, path)
	if err != nil {
		return nil, err
	}
	out := &jv{kind: 'a'}
	for _, x := range ta {
		for _, y := range tb {
			t := ""
			switch {
			case x == y:
				t = x
			case x == "integer" && y == "number", x == "number" && y == "integer":
				t = "integer"
			}
			if t != "" && !slices.ContainsFunc(out.arr, func(e *jv) bool { return e.str == t }) {
				out.arr = append(out.arr, &jv{kind: 's', str: t})
			}
		}
	}
	if len(out.arr) == 0 {
		return nil, c.fail(path+"/type", "allOf: the types have nothing in common")
	}
	return out, nil
}
