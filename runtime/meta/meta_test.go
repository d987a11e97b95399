package meta

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
)

func encode(t testing.TB, m *Map) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := &Writer{W: &buf}
	WriteKVs(w, m)
	if w.Err != nil {
		t.Fatal(w.Err)
	}
	if w.N != int64(buf.Len()) {
		t.Fatalf("Writer counted %d bytes, wrote %d", w.N, buf.Len())
	}
	return buf.Bytes()
}

func decode(b []byte, n uint64) (*Map, *Reader, error) {
	r := NewReader(bytes.NewReader(b), 100, int64(len(b)))
	m, err := ReadKVs(r, n)
	return m, r, err
}

// nest wraps v in depth arrays of arrays.
func nest(v Value, depth int) Value {
	for i := 0; i < depth; i++ {
		v = Arr(Array, []Value{v})
	}
	return v
}

func everyKind() *Map {
	var m Map
	m.Set("u8", U8(200))
	m.Set("i8", I8(-100))
	m.Set("u16", U16(60000))
	m.Set("i16", I16(-30000))
	m.Set("u32", U32(4000000000))
	m.Set("i32", I32(-2000000000))
	m.Set("f32", F32(-1.5))
	m.Set("f32.nan", F32(float32(math.NaN())))
	m.Set("f32.inf", F32(float32(math.Inf(-1))))
	m.Set("bool.t", B(true))
	m.Set("bool.f", B(false))
	m.Set("str", Str("héllo\x00world"))
	m.Set("str.empty", Str(""))
	m.Set("u64", U64(math.MaxUint64))
	m.Set("i64", I64(math.MinInt64))
	m.Set("f64", F64(math.Pi))
	m.Set("", Str("empty key"))
	m.Set("arr.str", Strs([]string{"a", "", "ccc"}))
	m.Set("arr.i32", I32s([]int32{1, -2, math.MaxInt32}))
	m.Set("arr.u32", U32s([]uint32{0, math.MaxUint32}))
	m.Set("arr.f32", F32s([]float32{1.5, -2, 0}))
	m.Set("arr.empty", F32s(nil))
	m.Set("arr.u8", Arr(Uint8, []Value{U8(1), U8(255)}))
	m.Set("arr.i8", Arr(Int8, []Value{I8(-1), I8(127)}))
	m.Set("arr.u16", Arr(Uint16, []Value{U16(1), U16(65535)}))
	m.Set("arr.i16", Arr(Int16, []Value{I16(-32768)}))
	m.Set("arr.bool", Arr(Bool, []Value{B(true), B(false), B(true)}))
	m.Set("arr.u64", Arr(Uint64, []Value{U64(1 << 63)}))
	m.Set("arr.i64", Arr(Int64, []Value{I64(-1)}))
	m.Set("arr.f64", Arr(Float64, []Value{F64(-0.25), F64(math.Inf(1))}))
	m.Set("arr.nested", Arr(Array, []Value{I32s([]int32{1, -2}), Strs([]string{"x"}), Arr(Array, []Value{U32s([]uint32{7})}), Arr(Array, nil)}))
	m.Set("arr.deepest", nest(U32s([]uint32{1, 2}), MaxDepth-1)) // MaxDepth array levels in all
	return &m
}

func TestRoundTripEveryKind(t *testing.T) {
	m := everyKind()
	kinds := map[Kind]bool{}
	elems := map[Kind]bool{}
	for _, kv := range m.All() {
		kinds[kv.Value.Kind()] = true
		if kv.Value.Kind() == Array {
			elems[kv.Value.Elem()] = true
		}
	}
	for k := Kind(0); k.Valid(); k++ {
		if !kinds[k] || !elems[k] {
			t.Fatalf("test map lacks kind %s as a scalar or an array element", k)
		}
	}
	b := encode(t, m)
	got, r, err := decode(b, uint64(m.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if r.Remain != 0 || r.Off != 100+int64(len(b)) {
		t.Fatalf("reader left %d bytes at offset %d", r.Remain, r.Off)
	}
	if !got.Equal(m) {
		for _, kv := range m.All() {
			g, _ := got.Get(kv.Key)
			if !g.Equal(kv.Value) {
				t.Errorf("%q: got %s %s, want %s %s", kv.Key, g.Kind(), g, kv.Value.Kind(), kv.Value)
			}
		}
		t.Fatal("round trip differs")
	}
	// Re-encoding what was read gives the same bytes.
	if b2 := encode(t, got); !bytes.Equal(b, b2) {
		t.Fatal("re-encoding differs")
	}
	// Typed accessors on what was read.
	if s, ok := got.Strings("arr.str"); !ok || len(s) != 3 || s[2] != "ccc" {
		t.Errorf("Strings: %v %v", s, ok)
	}
	if v, ok := got.Int32s("arr.i32"); !ok || v[1] != -2 {
		t.Errorf("Int32s: %v %v", v, ok)
	}
	if v, ok := got.Float32s("arr.u16"); !ok || v[1] != 65535 {
		t.Errorf("Float32s of u16: %v %v", v, ok)
	}
	if v, ok := got.Int("i64"); !ok || v != math.MinInt64 {
		t.Errorf("Int: %v %v", v, ok)
	}
	if _, ok := got.Uint("i8"); ok {
		t.Error("Uint of a negative i8 succeeded")
	}
	if v, ok := got.Bool("bool.t"); !ok || !v {
		t.Error("Bool")
	}
}

// Every proper prefix of a valid encoding fails as truncated, never panics.
func TestTruncatedEverywhere(t *testing.T) {
	m := everyKind()
	b := encode(t, m)
	for i := 0; i < len(b); i++ {
		_, _, err := decode(b[:i], uint64(m.Len()))
		if err == nil {
			t.Fatalf("prefix of %d/%d bytes parsed", i, len(b))
		}
	}
}

// A Reader whose Remain claims more than the stream holds still errors.
func TestShortStream(t *testing.T) {
	b := encode(t, everyKind())
	r := NewReader(bytes.NewReader(b[:len(b)/2]), 0, int64(len(b)))
	if _, err := ReadKVs(r, uint64(everyKind().Len())); !errors.Is(err, ErrTruncated) {
		t.Fatalf("got %v, want ErrTruncated", err)
	}
}

// raw builds hostile wire bytes by hand.
type raw struct {
	bytes.Buffer
	w Writer
}

func newRaw() *raw { r := &raw{}; r.w.W = &r.Buffer; return r }

func TestHostile(t *testing.T) {
	type tc struct {
		name string
		n    uint64
		b    []byte
		want string
	}
	var cases []tc
	add := func(name string, n uint64, want string, build func(w *Writer)) {
		r := newRaw()
		build(&r.w)
		cases = append(cases, tc{name, n, r.Bytes(), want})
	}
	add("absurd entry count", 1<<60, "cannot fit", func(w *Writer) {
		w.String("k")
		w.U32(uint32(Uint8))
		w.U8(1)
	})
	add("absurd array count u64", 1, "cannot fit", func(w *Writer) {
		w.String("k")
		w.U32(uint32(Array))
		w.U32(uint32(Uint64))
		w.U64(1 << 61)
		w.U64(0)
	})
	add("absurd array count max", 1, "cannot fit", func(w *Writer) {
		w.String("k")
		w.U32(uint32(Array))
		w.U32(uint32(Uint8))
		w.U64(math.MaxUint64)
		w.Bytes(make([]byte, 64))
	})
	add("absurd array of strings", 1, "cannot fit", func(w *Writer) {
		w.String("k")
		w.U32(uint32(Array))
		w.U32(uint32(String))
		w.U64(1 << 40)
		w.Bytes(make([]byte, 64))
	})
	add("absurd array of arrays", 1, "cannot fit", func(w *Writer) {
		w.String("k")
		w.U32(uint32(Array))
		w.U32(uint32(Array))
		w.U64(1 << 40)
		w.Bytes(make([]byte, 64))
	})
	add("absurd key length", 1, "string length", func(w *Writer) {
		w.U64(1 << 40)
		w.Bytes(make([]byte, 64))
	})
	add("key length past end", 1, "past the end", func(w *Writer) {
		w.U64(1000)
		w.Bytes(make([]byte, 64))
	})
	add("string over the limit", 1, "limit", func(w *Writer) {
		w.String("k")
		w.U32(uint32(String))
		w.U64(MaxStringLen + 1)
		w.Bytes(make([]byte, 64))
	})
	add("string length max u64", 1, "limit", func(w *Writer) {
		w.String("k")
		w.U32(uint32(String))
		w.U64(math.MaxUint64)
		w.Bytes(make([]byte, 64))
	})
	add("string element past end", 1, "past the end", func(w *Writer) {
		w.String("k")
		w.U32(uint32(Array))
		w.U32(uint32(String))
		w.U64(2)
		w.String("ok")
		w.U64(5000)
		w.Bytes(make([]byte, 10))
	})
	add("unknown kind", 1, "unknown value type 13", func(w *Writer) {
		w.String("k")
		w.U32(13)
		w.Bytes(make([]byte, 16))
	})
	add("unknown kind max", 1, "unknown value type", func(w *Writer) {
		w.String("k")
		w.U32(math.MaxUint32)
		w.Bytes(make([]byte, 16))
	})
	add("unknown element kind", 1, "unknown array element type", func(w *Writer) {
		w.String("k")
		w.U32(uint32(Array))
		w.U32(13)
		w.U64(1)
		w.Bytes(make([]byte, 16))
	})
	add("bool byte 2", 1, "bool byte is 2", func(w *Writer) {
		w.String("k")
		w.U32(uint32(Bool))
		w.U8(2)
	})
	add("bool array byte 2", 1, "bool byte is 2", func(w *Writer) {
		w.String("k")
		w.U32(uint32(Array))
		w.U32(uint32(Bool))
		w.U64(3)
		w.Bytes([]byte{1, 0, 2})
	})
	add("bool byte 255 nested", 1, "bool byte is 255", func(w *Writer) {
		w.String("k")
		w.U32(uint32(Array))
		w.U32(uint32(Array))
		w.U64(1)
		w.U32(uint32(Bool))
		w.U64(1)
		w.U8(255)
	})
	add("duplicate key", 2, "duplicate metadata key", func(w *Writer) {
		for i := 0; i < 2; i++ {
			w.String("general.name")
			w.U32(uint32(String))
			w.String("x")
		}
	})
	add("too deep", 1, "nested deeper", func(w *Writer) {
		w.String("k")
		w.U32(uint32(Array))
		for i := 0; i < MaxDepth; i++ {
			w.U32(uint32(Array))
			w.U64(1)
		}
		w.U32(uint32(Uint8)) // never reached
		w.U64(0)
		w.Bytes(make([]byte, 64))
	})
	add("very deep", 1, "nested deeper", func(w *Writer) {
		w.String("k")
		w.U32(uint32(Array))
		for i := 0; i < 10000; i++ {
			w.U32(uint32(Array))
			w.U64(1)
		}
	})
	add("fewer entries than claimed", 3, "truncated", func(w *Writer) {
		for _, k := range []string{"a", "b"} {
			w.String(k)
			w.U32(uint32(Uint32))
			w.U32(1)
		}
		w.Bytes(make([]byte, 5)) // enough for the count check, too few for a key
	})
	for _, c := range cases {
		m, _, err := decode(c.b, c.n)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v (map %v), want error containing %q", c.name, err, m != nil, c.want)
		}
		if err != nil && m != nil {
			t.Errorf("%s: error with a non-nil map", c.name)
		}
	}
}

// The deepest nesting the reader accepts round-trips; one more level fails.
func TestDepthLimit(t *testing.T) {
	for depth := 1; depth <= MaxDepth+1; depth++ {
		var m Map
		m.Set("k", nest(F32s([]float32{1}), depth-1)) // depth array levels
		b := encode(t, &m)
		got, _, err := decode(b, 1)
		if depth <= MaxDepth {
			if err != nil || !got.Equal(&m) {
				t.Fatalf("%d levels: %v", depth, err)
			}
		} else if err == nil || !strings.Contains(err.Error(), "nested deeper") {
			t.Fatalf("%d levels: got %v, want a depth error", depth, err)
		}
	}
}

func TestMapSetReplaces(t *testing.T) {
	var m Map
	m.Set("a", U32(1))
	m.Set("b", U32(2))
	m.Set("a", Str("x"))
	if m.Len() != 2 || m.All()[0].Key != "a" {
		t.Fatalf("entries %v", m.All())
	}
	if s, ok := m.String("a"); !ok || s != "x" {
		t.Fatalf("a = %q %v", s, ok)
	}
	var nilMap *Map
	if nilMap.Len() != 0 || nilMap.Has("a") {
		t.Fatal("nil map")
	}
}

func FuzzReadKVs(f *testing.F) {
	m := everyKind()
	b := encode(f, m)
	f.Add(uint8(m.Len()), b)
	f.Add(uint8(1), b[:40])
	var small Map
	small.Set("general.architecture", Str("llama"))
	small.Set("x", Arr(Array, []Value{I32s([]int32{1}), Arr(Bool, []Value{B(true)})}))
	f.Add(uint8(2), encode(f, &small))
	f.Fuzz(func(t *testing.T, n uint8, b []byte) {
		got, r, err := decode(b, uint64(n))
		if err != nil {
			if got != nil {
				t.Fatal("error with a map")
			}
			return
		}
		if got.Len() != int(n) {
			t.Fatalf("%d entries read, %d asked", got.Len(), n)
		}
		used := int64(len(b)) - r.Remain
		if r.Off != 100+used {
			t.Fatalf("offset %d after %d bytes", r.Off, used)
		}
		// What was read re-encodes to as many bytes and reads back equal.
		enc := encode(t, got)
		if int64(len(enc)) != used {
			t.Fatalf("re-encoded to %d bytes, read %d", len(enc), used)
		}
		again, _, err := decode(enc, uint64(n))
		if err != nil {
			t.Fatalf("re-encoded metadata does not parse: %v", err)
		}
		if !again.Equal(got) {
			t.Fatal("re-encoded metadata differs")
		}
		for _, kv := range got.All() {
			_ = kv.Value.String()
			_ = kv.Value.JSON()
		}
	})
}
