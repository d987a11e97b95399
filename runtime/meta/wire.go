package meta

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// The wire form of metadata is GGUF's: a key is a u64 length and bytes, a
// value is a u32 kind and the value; strings are a u64 length and bytes; an
// array is a u32 element kind, a u64 count and the elements. GGUF files and
// .jlm containers both use it.

// MaxDepth bounds array nesting so a hostile file cannot recurse forever.
const MaxDepth = 8

// MaxStringLen bounds one string (keys, tokens, chat templates).
const MaxStringLen = 64 << 20

// Reader reads little-endian values from a stream of known remaining size,
// keeping the offset for error messages. Every length read from the stream
// is checked against what remains before anything is allocated for it.
type Reader struct {
	r      *bufio.Reader
	Off    int64 // bytes consumed so far, counted from where the stream began
	Remain int64 // bytes left in the stream
	buf    [8]byte
}

// NewReader reads size bytes from r starting at offset off (for messages).
func NewReader(r io.Reader, off, size int64) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 1<<16), Off: off, Remain: size}
}

// ErrTruncated is wrapped by errors for input that ends early.
var ErrTruncated = errors.New("truncated")

func (r *Reader) fill(n int) ([]byte, error) {
	if int64(n) > r.Remain {
		return nil, fmt.Errorf("at offset %d: need %d bytes, %d left: %w", r.Off, n, r.Remain, ErrTruncated)
	}
	b := r.buf[:n]
	if _, err := io.ReadFull(r.r, b); err != nil {
		return nil, fmt.Errorf("at offset %d: %w (%v)", r.Off, ErrTruncated, err)
	}
	r.Off += int64(n)
	r.Remain -= int64(n)
	return b, nil
}

func (r *Reader) U8() (uint8, error) {
	b, err := r.fill(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (r *Reader) U16() (uint16, error) {
	b, err := r.fill(2)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(b), nil
}

func (r *Reader) U32() (uint32, error) {
	b, err := r.fill(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (r *Reader) U64() (uint64, error) {
	b, err := r.fill(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// Bytes reads n bytes into a new slice, after checking n against what remains.
func (r *Reader) Bytes(n uint64) ([]byte, error) {
	if n > uint64(r.Remain) {
		return nil, fmt.Errorf("at offset %d: length %d runs past the end (%d bytes left): %w", r.Off, n, r.Remain, ErrTruncated)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.r, b); err != nil {
		return nil, fmt.Errorf("at offset %d: %w (%v)", r.Off, ErrTruncated, err)
	}
	r.Off += int64(n)
	r.Remain -= int64(n)
	return b, nil
}

// Skip discards n bytes.
func (r *Reader) Skip(n int64) error {
	if n < 0 || n > r.Remain {
		return fmt.Errorf("at offset %d: cannot skip %d bytes (%d left): %w", r.Off, n, r.Remain, ErrTruncated)
	}
	if _, err := r.r.Discard(int(n)); err != nil {
		return fmt.Errorf("at offset %d: %w (%v)", r.Off, ErrTruncated, err)
	}
	r.Off += n
	r.Remain -= n
	return nil
}

// String reads a u64-length-prefixed string.
func (r *Reader) String() (string, error) {
	at := r.Off
	n, err := r.U64()
	if err != nil {
		return "", err
	}
	if n > MaxStringLen {
		return "", fmt.Errorf("at offset %d: string length %d exceeds the %d-byte limit", at, n, MaxStringLen)
	}
	b, err := r.Bytes(n)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// ReadKVs reads n key/value pairs into a new Map. Duplicate keys are an error,
// as llama.cpp treats them.
func ReadKVs(r *Reader, n uint64) (*Map, error) {
	// Each entry needs at least a key length, a kind and one value byte.
	if n > uint64(r.Remain)/13 {
		return nil, fmt.Errorf("at offset %d: %d metadata entries cannot fit in the %d bytes left", r.Off, n, r.Remain)
	}
	m := &Map{index: make(map[string]int, n)}
	for i := uint64(0); i < n; i++ {
		at := r.Off
		key, err := r.String()
		if err != nil {
			return nil, fmt.Errorf("metadata entry %d key: %w", i, err)
		}
		if m.Has(key) {
			return nil, fmt.Errorf("at offset %d: duplicate metadata key %q", at, key)
		}
		k, err := r.U32()
		if err != nil {
			return nil, fmt.Errorf("metadata %q type: %w", key, err)
		}
		v, err := readValue(r, Kind(k), 0)
		if err != nil {
			return nil, fmt.Errorf("metadata %q: %w", key, err)
		}
		m.Set(key, v)
	}
	return m, nil
}

func readValue(r *Reader, k Kind, depth int) (Value, error) {
	at := r.Off
	switch k {
	case Uint8, Int8, Bool:
		b, err := r.U8()
		if err != nil {
			return Value{}, err
		}
		switch k {
		case Uint8:
			return U8(b), nil
		case Int8:
			return I8(int8(b)), nil
		}
		if b > 1 {
			return Value{}, fmt.Errorf("at offset %d: bool byte is %d, not 0 or 1", at, b)
		}
		return B(b == 1), nil
	case Uint16, Int16:
		x, err := r.U16()
		if err != nil {
			return Value{}, err
		}
		if k == Int16 {
			return I16(int16(x)), nil
		}
		return U16(x), nil
	case Uint32, Int32, Float32:
		x, err := r.U32()
		if err != nil {
			return Value{}, err
		}
		switch k {
		case Int32:
			return I32(int32(x)), nil
		case Float32:
			return F32(math.Float32frombits(x)), nil
		}
		return U32(x), nil
	case Uint64, Int64, Float64:
		x, err := r.U64()
		if err != nil {
			return Value{}, err
		}
		switch k {
		case Int64:
			return I64(int64(x)), nil
		case Float64:
			return F64(math.Float64frombits(x)), nil
		}
		return U64(x), nil
	case String:
		s, err := r.String()
		if err != nil {
			return Value{}, err
		}
		return Str(s), nil
	case Array:
		if depth >= MaxDepth {
			return Value{}, fmt.Errorf("at offset %d: arrays nested deeper than %d", at, MaxDepth)
		}
		ek, err := r.U32()
		if err != nil {
			return Value{}, err
		}
		elem := Kind(ek)
		if !elem.Valid() {
			return Value{}, fmt.Errorf("at offset %d: unknown array element type %d", at, ek)
		}
		n, err := r.U64()
		if err != nil {
			return Value{}, err
		}
		return readArray(r, elem, n, depth)
	}
	return Value{}, fmt.Errorf("at offset %d: unknown value type %d", at, uint32(k))
}

func readArray(r *Reader, elem Kind, n uint64, depth int) (Value, error) {
	at := r.Off
	min := uint64(elem.size())
	if elem == String {
		min = 8
	} else if elem == Array {
		min = 12
	}
	if n > uint64(r.Remain)/min {
		return Value{}, fmt.Errorf("at offset %d: array of %d %s cannot fit in the %d bytes left", at, n, elem, r.Remain)
	}
	switch elem {
	case String:
		a := make([]string, n)
		for i := range a {
			s, err := r.String()
			if err != nil {
				return Value{}, fmt.Errorf("element %d: %w", i, err)
			}
			a[i] = s
		}
		return Strs(a), nil
	case Array:
		a := make([]Value, n)
		for i := range a {
			v, err := readValue(r, Array, depth+1)
			if err != nil {
				return Value{}, fmt.Errorf("element %d: %w", i, err)
			}
			a[i] = v
		}
		return Arr(Array, a), nil
	}
	raw, err := r.Bytes(n * min)
	if err != nil {
		return Value{}, err
	}
	le := binary.LittleEndian
	var arr any
	switch elem {
	case Uint8:
		arr = raw
	case Int8:
		a := make([]int8, n)
		for i := range a {
			a[i] = int8(raw[i])
		}
		arr = a
	case Bool:
		a := make([]bool, n)
		for i := range a {
			if raw[i] > 1 {
				return Value{}, fmt.Errorf("at offset %d: bool byte is %d, not 0 or 1", at+int64(i), raw[i])
			}
			a[i] = raw[i] == 1
		}
		arr = a
	case Uint16:
		a := make([]uint16, n)
		for i := range a {
			a[i] = le.Uint16(raw[2*i:])
		}
		arr = a
	case Int16:
		a := make([]int16, n)
		for i := range a {
			a[i] = int16(le.Uint16(raw[2*i:]))
		}
		arr = a
	case Uint32:
		a := make([]uint32, n)
		for i := range a {
			a[i] = le.Uint32(raw[4*i:])
		}
		arr = a
	case Int32:
		a := make([]int32, n)
		for i := range a {
			a[i] = int32(le.Uint32(raw[4*i:]))
		}
		arr = a
	case Float32:
		a := make([]float32, n)
		for i := range a {
			a[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
		arr = a
	case Uint64:
		a := make([]uint64, n)
		for i := range a {
			a[i] = le.Uint64(raw[8*i:])
		}
		arr = a
	case Int64:
		a := make([]int64, n)
		for i := range a {
			a[i] = int64(le.Uint64(raw[8*i:]))
		}
		arr = a
	case Float64:
		a := make([]float64, n)
		for i := range a {
			a[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
		arr = a
	}
	return Value{kind: Array, elem: elem, arr: arr}, nil
}

// Writer writes little-endian values and counts what it wrote.
type Writer struct {
	W   io.Writer
	N   int64
	Err error
	buf [8]byte
}

func (w *Writer) put(b []byte) {
	if w.Err != nil {
		return
	}
	n, err := w.W.Write(b)
	w.N += int64(n)
	w.Err = err
}

func (w *Writer) U8(v uint8)     { w.buf[0] = v; w.put(w.buf[:1]) }
func (w *Writer) U16(v uint16)   { binary.LittleEndian.PutUint16(w.buf[:], v); w.put(w.buf[:2]) }
func (w *Writer) U32(v uint32)   { binary.LittleEndian.PutUint32(w.buf[:], v); w.put(w.buf[:4]) }
func (w *Writer) U64(v uint64)   { binary.LittleEndian.PutUint64(w.buf[:], v); w.put(w.buf[:8]) }
func (w *Writer) Bytes(b []byte) { w.put(b) }
func (w *Writer) String(s string) {
	w.U64(uint64(len(s)))
	w.put([]byte(s))
}

// Pad writes zero bytes until N is a multiple of align.
func (w *Writer) Pad(align int64) {
	var zero [64]byte
	for w.N%align != 0 && w.Err == nil {
		k := align - w.N%align
		if k > int64(len(zero)) {
			k = int64(len(zero))
		}
		w.put(zero[:k])
	}
}

// WriteKVs writes every entry of m in order.
func WriteKVs(w *Writer, m *Map) {
	for _, kv := range m.All() {
		w.String(kv.Key)
		w.U32(uint32(kv.Value.kind))
		writeValue(w, kv.Value)
	}
}

func writeValue(w *Writer, v Value) {
	switch v.kind {
	case Uint8, Int8, Bool:
		w.U8(uint8(v.u))
	case Uint16, Int16:
		w.U16(uint16(v.u))
	case Uint32, Int32:
		w.U32(uint32(v.u))
	case Float32:
		w.U32(math.Float32bits(float32(v.f)))
	case Uint64, Int64:
		w.U64(v.u)
	case Float64:
		w.U64(math.Float64bits(v.f))
	case String:
		w.String(v.s)
	case Array:
		w.U32(uint32(v.elem))
		n := v.Len()
		w.U64(uint64(n))
		if b, ok := v.arr.([]uint8); ok {
			w.Bytes(b)
			return
		}
		for i := 0; i < n; i++ {
			writeValue(w, v.At(i))
		}
	}
}

// Write implements io.Writer so data can stream through a Writer.
func (w *Writer) Write(b []byte) (int, error) {
	if w.Err != nil {
		return 0, w.Err
	}
	w.put(b)
	return len(b), w.Err
}
