// Package meta holds model metadata as typed key/value pairs. Keys and value
// types follow GGUF (llama.cpp's vocabulary: "llama.block_count",
// "tokenizer.ggml.tokens"), so GGUF files and .jlm containers carry the same
// metadata and every consumer reads it one way.
package meta

import (
	"fmt"
	"math"
	"sort"
)

// Kind is a value type, numbered as GGUF numbers them.
type Kind uint32

const (
	Uint8   Kind = 0
	Int8    Kind = 1
	Uint16  Kind = 2
	Int16   Kind = 3
	Uint32  Kind = 4
	Int32   Kind = 5
	Float32 Kind = 6
	Bool    Kind = 7
	String  Kind = 8
	Array   Kind = 9
	Uint64  Kind = 10
	Int64   Kind = 11
	Float64 Kind = 12
)

var kindNames = [...]string{"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint32(k))
}

// Valid reports whether k is one of GGUF's value types.
func (k Kind) Valid() bool { return k <= Float64 }

// size is the wire size of a fixed-size scalar kind (0 for string and array).
func (k Kind) size() int {
	switch k {
	case Uint8, Int8, Bool:
		return 1
	case Uint16, Int16:
		return 2
	case Uint32, Int32, Float32:
		return 4
	case Uint64, Int64, Float64:
		return 8
	}
	return 0
}

func (k Kind) signed() bool { return k == Int8 || k == Int16 || k == Int32 || k == Int64 }
func (k Kind) float() bool  { return k == Float32 || k == Float64 }

// Value is one metadata value: a scalar, a string, or an array of one kind.
// Arrays are held as typed slices ([]uint32, []string, []Value for nested
// arrays ...) so that a 150k-entry vocabulary costs what its strings cost.
type Value struct {
	kind Kind
	elem Kind // element kind when kind == Array
	u    uint64
	f    float64
	s    string
	arr  any
}

// Constructors for scalars.
func U8(v uint8) Value    { return Value{kind: Uint8, u: uint64(v)} }
func I8(v int8) Value     { return Value{kind: Int8, u: uint64(int64(v))} }
func U16(v uint16) Value  { return Value{kind: Uint16, u: uint64(v)} }
func I16(v int16) Value   { return Value{kind: Int16, u: uint64(int64(v))} }
func U32(v uint32) Value  { return Value{kind: Uint32, u: uint64(v)} }
func I32(v int32) Value   { return Value{kind: Int32, u: uint64(int64(v))} }
func U64(v uint64) Value  { return Value{kind: Uint64, u: v} }
func I64(v int64) Value   { return Value{kind: Int64, u: uint64(v)} }
func F32(v float32) Value { return Value{kind: Float32, f: float64(v)} }
func F64(v float64) Value { return Value{kind: Float64, f: v} }
func B(v bool) Value {
	x := Value{kind: Bool}
	if v {
		x.u = 1
	}
	return x
}
func Str(v string) Value { return Value{kind: String, s: v} }

// Arrays. The slice is kept, not copied.
func Strs(v []string) Value  { return Value{kind: Array, elem: String, arr: v} }
func I32s(v []int32) Value   { return Value{kind: Array, elem: Int32, arr: v} }
func U32s(v []uint32) Value  { return Value{kind: Array, elem: Uint32, arr: v} }
func F32s(v []float32) Value { return Value{kind: Array, elem: Float32, arr: v} }
func Arr(elem Kind, v []Value) Value {
	return Value{kind: Array, elem: elem, arr: v}
}

// Kind is the value's type; Elem the element type of an array.
func (v Value) Kind() Kind { return v.kind }
func (v Value) Elem() Kind { return v.elem }

// Uint returns an unsigned or non-negative signed integer value.
func (v Value) Uint() (uint64, bool) {
	switch {
	case v.kind.signed():
		if int64(v.u) < 0 {
			return 0, false
		}
		return v.u, true
	case v.kind.size() > 0 && !v.kind.float() && v.kind != Bool:
		return v.u, true
	}
	return 0, false
}

// Int returns any integer value that fits an int64.
func (v Value) Int() (int64, bool) {
	switch {
	case v.kind.signed():
		return int64(v.u), true
	case v.kind.size() > 0 && !v.kind.float() && v.kind != Bool:
		if v.u > math.MaxInt64 {
			return 0, false
		}
		return int64(v.u), true
	}
	return 0, false
}

// Float returns a float, or an integer converted to float.
func (v Value) Float() (float64, bool) {
	if v.kind.float() {
		return v.f, true
	}
	if i, ok := v.Int(); ok {
		return float64(i), true
	}
	return 0, false
}

func (v Value) Bool() (bool, bool)  { return v.u != 0, v.kind == Bool }
func (v Value) Str() (string, bool) { return v.s, v.kind == String }

// Len is the number of elements of an array (0 for scalars).
func (v Value) Len() int {
	switch a := v.arr.(type) {
	case []string:
		return len(a)
	case []Value:
		return len(a)
	case []uint8:
		return len(a)
	case []int8:
		return len(a)
	case []uint16:
		return len(a)
	case []int16:
		return len(a)
	case []uint32:
		return len(a)
	case []int32:
		return len(a)
	case []uint64:
		return len(a)
	case []int64:
		return len(a)
	case []float32:
		return len(a)
	case []float64:
		return len(a)
	case []bool:
		return len(a)
	}
	return 0
}

// Strings returns a string array.
func (v Value) Strings() ([]string, bool) { a, ok := v.arr.([]string); return a, ok }

// Values returns a nested array's elements.
func (v Value) Values() ([]Value, bool) { a, ok := v.arr.([]Value); return a, ok }

// Raw returns the typed slice behind an array ([]int32, []float32, ...).
func (v Value) Raw() any { return v.arr }

// Float32s returns a numeric array converted to float32.
func (v Value) Float32s() ([]float32, bool) {
	if a, ok := v.arr.([]float32); ok {
		return a, true
	}
	n := v.Len()
	if v.kind != Array || v.elem == String || v.elem == Array || v.elem == Bool {
		return nil, false
	}
	out := make([]float32, n)
	for i := range out {
		x, _ := v.At(i).Float()
		out[i] = float32(x)
	}
	return out, true
}

// Int32s returns an integer array converted to int32 (values must fit).
func (v Value) Int32s() ([]int32, bool) {
	if a, ok := v.arr.([]int32); ok {
		return a, true
	}
	if v.kind != Array || v.elem.float() || v.elem == String || v.elem == Array || v.elem == Bool {
		return nil, false
	}
	out := make([]int32, v.Len())
	for i := range out {
		x, _ := v.At(i).Int()
		if x < math.MinInt32 || x > math.MaxInt32 {
			return nil, false
		}
		out[i] = int32(x)
	}
	return out, true
}

// At returns element i of an array as a Value.
func (v Value) At(i int) Value {
	switch a := v.arr.(type) {
	case []string:
		return Str(a[i])
	case []Value:
		return a[i]
	case []uint8:
		return U8(a[i])
	case []int8:
		return I8(a[i])
	case []uint16:
		return U16(a[i])
	case []int16:
		return I16(a[i])
	case []uint32:
		return U32(a[i])
	case []int32:
		return I32(a[i])
	case []uint64:
		return U64(a[i])
	case []int64:
		return I64(a[i])
	case []float32:
		return F32(a[i])
	case []float64:
		return F64(a[i])
	case []bool:
		return B(a[i])
	}
	panic("meta: At on a non-array value")
}

// Equal reports whether two values have the same type and contents.
func (v Value) Equal(w Value) bool {
	if v.kind != w.kind || v.elem != w.elem {
		return false
	}
	if v.kind != Array {
		return v.u == w.u && v.s == w.s && (v.f == w.f || (v.f != v.f && w.f != w.f))
	}
	if v.Len() != w.Len() {
		return false
	}
	for i := 0; i < v.Len(); i++ {
		if !v.At(i).Equal(w.At(i)) {
			return false
		}
	}
	return true
}

// String renders a value for people; long arrays are abbreviated.
func (v Value) String() string {
	switch v.kind {
	case String:
		return fmt.Sprintf("%q", v.s)
	case Bool:
		return fmt.Sprint(v.u != 0)
	case Float32, Float64:
		return fmt.Sprint(v.f)
	case Array:
		n := v.Len()
		s := "["
		for i := 0; i < n && i < 8; i++ {
			if i > 0 {
				s += ", "
			}
			s += v.At(i).String()
		}
		if n > 8 {
			s += fmt.Sprintf(", … (%d %s)", n, v.elem)
		}
		return s + "]"
	}
	if v.kind.signed() {
		return fmt.Sprint(int64(v.u))
	}
	return fmt.Sprint(v.u)
}

// JSON returns the value as plain Go data for encoding/json.
func (v Value) JSON() any {
	switch v.kind {
	case String:
		return v.s
	case Bool:
		return v.u != 0
	case Float32, Float64:
		if math.IsNaN(v.f) || math.IsInf(v.f, 0) {
			return fmt.Sprint(v.f)
		}
		return v.f
	case Array:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = v.At(i).JSON()
		}
		return out
	}
	if v.kind.signed() {
		return int64(v.u)
	}
	return v.u
}

// KV is one metadata entry.
type KV struct {
	Key   string
	Value Value
}

// Map is an ordered set of metadata entries with lookup by key.
type Map struct {
	kvs   []KV
	index map[string]int
}

// Set adds or replaces key.
func (m *Map) Set(key string, v Value) {
	if m.index == nil {
		m.index = map[string]int{}
	}
	if i, ok := m.index[key]; ok {
		m.kvs[i].Value = v
		return
	}
	m.index[key] = len(m.kvs)
	m.kvs = append(m.kvs, KV{key, v})
}

// Get returns the value under key.
func (m *Map) Get(key string) (Value, bool) {
	if m == nil {
		return Value{}, false
	}
	i, ok := m.index[key]
	if !ok {
		return Value{}, false
	}
	return m.kvs[i].Value, true
}

// Has reports whether key is present.
func (m *Map) Has(key string) bool { _, ok := m.Get(key); return ok }

// All returns the entries in insertion order.
func (m *Map) All() []KV {
	if m == nil {
		return nil
	}
	return m.kvs
}

// Len is the number of entries.
func (m *Map) Len() int {
	if m == nil {
		return 0
	}
	return len(m.kvs)
}

// Keys returns the keys sorted.
func (m *Map) Keys() []string {
	out := make([]string, 0, m.Len())
	for _, kv := range m.All() {
		out = append(out, kv.Key)
	}
	sort.Strings(out)
	return out
}

// String returns the string under key.
func (m *Map) String(key string) (string, bool) {
	v, ok := m.Get(key)
	if !ok {
		return "", false
	}
	return v.Str()
}

// Uint returns the non-negative integer under key.
func (m *Map) Uint(key string) (uint64, bool) {
	v, ok := m.Get(key)
	if !ok {
		return 0, false
	}
	return v.Uint()
}

// Int returns the integer under key.
func (m *Map) Int(key string) (int64, bool) {
	v, ok := m.Get(key)
	if !ok {
		return 0, false
	}
	return v.Int()
}

// Float returns the number under key.
func (m *Map) Float(key string) (float64, bool) {
	v, ok := m.Get(key)
	if !ok {
		return 0, false
	}
	return v.Float()
}

// Bool returns the bool under key.
func (m *Map) Bool(key string) (bool, bool) {
	v, ok := m.Get(key)
	if !ok {
		return false, false
	}
	return v.Bool()
}

// Strings returns the string array under key.
func (m *Map) Strings(key string) ([]string, bool) {
	v, ok := m.Get(key)
	if !ok {
		return nil, false
	}
	return v.Strings()
}

// Float32s returns the numeric array under key as float32.
func (m *Map) Float32s(key string) ([]float32, bool) {
	v, ok := m.Get(key)
	if !ok {
		return nil, false
	}
	return v.Float32s()
}

// Int32s returns the integer array under key as int32.
func (m *Map) Int32s(key string) ([]int32, bool) {
	v, ok := m.Get(key)
	if !ok {
		return nil, false
	}
	return v.Int32s()
}

// Equal reports whether both maps hold the same entries in the same order.
func (m *Map) Equal(o *Map) bool {
	a, b := m.All(), o.All()
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || !a[i].Value.Equal(b[i].Value) {
			return false
		}
	}
	return true
}
