// Package safetensors reads and writes Hugging Face safetensors files: an
// 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the raw row-major little-endian data.
//
// Only the header is read; tensor bytes stay on disk for the caller to map
// or read by Offset and Size. Checkpoints come from untrusted sources, so
// every header field is checked and allocations never exceed what the file
// itself can justify.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"sort"
	"strconv"
	"unicode/utf8"
)

// MaxHeader bounds the JSON header (the reference implementation uses the
// same 100 MiB limit); a larger length is taken as corruption rather than
// allocated.
const MaxHeader = 100 << 20

// maxRank bounds a tensor's shape so a hostile header cannot make us keep a
// huge dims slice per tensor; real checkpoints stay far below it.
const maxRank = 8

// metadataKey is the reserved header key holding free-form string metadata.
const metadataKey = "__metadata__"

// Tensor is one entry of a header; Offset is absolute in the file.
type Tensor struct {
	Name   string
	DType  string  // "F64","F32","F16","BF16","I64","I32","I16","I8","U8","BOOL","F8_E4M3","F8_E5M2"
	Shape  []int64 // torch order: the last dim is contiguous
	Offset int64   // absolute byte offset of the first byte in the file
	Size   int64   // bytes
}

// File is a parsed header.
type File struct {
	Size     int64             // the file's size
	DataAt   int64             // 8 + header length: where the data section starts
	Tensors  []Tensor          // sorted by Offset (ties by Name)
	Metadata map[string]string // "__metadata__", nil when absent
}

// dtypeSizes lists the whole-byte dtypes of the spec. Sub-byte types (F4,
// F6_*) are left out: their byte size is not elements × a whole number.
var dtypeSizes = map[string]int{
	"F64": 8, "F32": 4, "F16": 2, "BF16": 2,
	"I64": 8, "I32": 4, "I16": 2, "I8": 1,
	"U64": 8, "U32": 4, "U16": 2, "U8": 1,
	"BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
}

// DTypeSize is the bytes of one element of dtype, false if unknown.
func DTypeSize(dtype string) (int, bool) {
	n, ok := dtypeSizes[dtype]
	return n, ok
}

// Open parses the file at path (it does not keep it open).
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("safetensors: %s: not a regular file", path)
	}
	f, err := Parse(fh, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Parse reads and checks the header of a safetensors file of the given size.
func Parse(r io.ReaderAt, size int64) (*File, error) {
	if size < 8 {
		return nil, fmt.Errorf("safetensors: file is %d bytes, shorter than the 8-byte header length", size)
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors: reading header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	// Check against both bounds before allocating: the length comes from the
	// file and could be anything.
	if n > MaxHeader {
		return nil, fmt.Errorf("safetensors: header length %d exceeds the %d-byte limit", n, MaxHeader)
	}
	if n > uint64(size-8) {
		return nil, fmt.Errorf("safetensors: header length %d exceeds the %d bytes after the length field", n, size-8)
	}
	hdr := make([]byte, n)
	if _, err := r.ReadAt(hdr, 8); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
		return nil, fmt.Errorf("safetensors: reading %d-byte header: %w", n, err)
	}
	f := &File{Size: size, DataAt: 8 + int64(n)}
	if err := f.parseHeader(hdr); err != nil {
		return nil, err
	}
	return f, nil
}

// parseHeader decodes the JSON header as a token stream rather than into a
// map so that duplicate keys, which encoding/json would silently resolve to
// the last one, are caught: two entries for one tensor name mean the file is
// ambiguous.
func (f *File) parseHeader(hdr []byte) error {
	if !utf8.Valid(hdr) {
		// encoding/json would quietly replace bad bytes with U+FFFD and
		// could merge two distinct names into one.
		return errors.New("safetensors: header is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.UseNumber()
	if err := expectDelim(dec, '{'); err != nil {
		return fmt.Errorf("safetensors: header: %w", err)
	}
	dataLen := f.Size - f.DataAt
	seen := map[string]bool{}
	for dec.More() {
		key, err := readKey(dec)
		if err != nil {
			return fmt.Errorf("safetensors: header: %w", err)
		}
		if seen[key] {
			return fmt.Errorf("safetensors: header: duplicate key %q", key)
		}
		seen[key] = true
		if key == metadataKey {
			md, err := readStringMap(dec)
			if err != nil {
				return fmt.Errorf("safetensors: %s: %w", metadataKey, err)
			}
			f.Metadata = md
			continue
		}
		if key == "" {
			return errors.New("safetensors: header: empty tensor name")
		}
		t, err := readTensor(dec, dataLen)
		if err != nil {
			return fmt.Errorf("safetensors: tensor %q: %w", key, err)
		}
		t.Name = key
		t.Offset += f.DataAt
		f.Tensors = append(f.Tensors, t)
	}
	if err := expectDelim(dec, '}'); err != nil {
		return fmt.Errorf("safetensors: header: %w", err)
	}
	// The spec pads the header with spaces only; anything else after the
	// object means the length or the JSON is wrong.
	for i := dec.InputOffset(); i < int64(len(hdr)); i++ {
		if hdr[i] != ' ' {
			return fmt.Errorf("safetensors: header: unexpected byte %q at %d after the JSON object", hdr[i], i)
		}
	}
	return f.checkOverlap()
}

// checkOverlap sorts the tensors and rejects any two that share bytes, since
// writing into one would silently change the other. Zero-size tensors own no
// bytes and may sit anywhere in range.
func (f *File) checkOverlap() error {
	sort.Slice(f.Tensors, func(i, j int) bool {
		a, b := &f.Tensors[i], &f.Tensors[j]
		if a.Offset != b.Offset {
			return a.Offset < b.Offset
		}
		return a.Name < b.Name
	})
	var prev *Tensor
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if t.Size == 0 {
			continue
		}
		if prev != nil && t.Offset < prev.Offset+prev.Size {
			return fmt.Errorf("safetensors: tensor %q: bytes [%d, %d) overlap tensor %q [%d, %d)",
				t.Name, t.Offset, t.Offset+t.Size, prev.Name, prev.Offset, prev.Offset+prev.Size)
		}
		prev = t
	}
	return nil
}

// readTensor reads one {"dtype", "shape", "data_offsets"} object. Offset in
// the result is relative to the data section, which holds dataLen bytes.
func readTensor(dec *json.Decoder, dataLen int64) (Tensor, error) {
	var t Tensor
	if err := expectDelim(dec, '{'); err != nil {
		return t, err
	}
	var (
		haveDType, haveShape, haveOffsets bool
		begin, end                        int64
	)
	for dec.More() {
		key, err := readKey(dec)
		if err != nil {
			return t, err
		}
		switch key {
		case "dtype":
			if haveDType {
				return t, errors.New("duplicate key \"dtype\"")
			}
			haveDType = true
			if t.DType, err = readString(dec); err != nil {
				return t, fmt.Errorf("dtype: %w", err)
			}
			if _, ok := DTypeSize(t.DType); !ok {
				return t, fmt.Errorf("unknown dtype %q", t.DType)
			}
		case "shape":
			if haveShape {
				return t, errors.New("duplicate key \"shape\"")
			}
			haveShape = true
			if t.Shape, err = readInts(dec, maxRank); err != nil {
				return t, fmt.Errorf("shape: %w", err)
			}
		case "data_offsets":
			if haveOffsets {
				return t, errors.New("duplicate key \"data_offsets\"")
			}
			haveOffsets = true
			offs, err := readInts(dec, 2)
			if err != nil {
				return t, fmt.Errorf("data_offsets: %w", err)
			}
			if len(offs) != 2 {
				return t, fmt.Errorf("data_offsets: want [begin, end], got %d numbers", len(offs))
			}
			begin, end = offs[0], offs[1]
		default:
			// The spec defines exactly these three fields; an unknown one
			// most likely means a format we do not understand.
			return t, fmt.Errorf("unknown field %q", key)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return t, err
	}
	switch {
	case !haveDType:
		return t, errors.New("missing dtype")
	case !haveShape:
		return t, errors.New("missing shape")
	case !haveOffsets:
		return t, errors.New("missing data_offsets")
	}
	if begin > end {
		return t, fmt.Errorf("data_offsets [%d, %d]: begin after end", begin, end)
	}
	if end > dataLen {
		return t, fmt.Errorf("data_offsets [%d, %d]: past the end of the %d-byte data section", begin, end, dataLen)
	}
	want, err := byteSize(t.DType, t.Shape)
	if err != nil {
		return t, err
	}
	if want != end-begin {
		return t, fmt.Errorf("shape %v of %s needs %d bytes, data_offsets [%d, %d] hold %d", t.Shape, t.DType, want, begin, end, end-begin)
	}
	t.Offset, t.Size = begin, end-begin
	return t, nil
}

// byteSize is elements × element size, failing rather than wrapping on
// overflow: a wrapped product could match a small byte range and pass.
func byteSize(dtype string, shape []int64) (int64, error) {
	es, ok := DTypeSize(dtype)
	if !ok {
		return 0, fmt.Errorf("unknown dtype %q", dtype)
	}
	if len(shape) > maxRank {
		return 0, fmt.Errorf("rank %d exceeds %d", len(shape), maxRank)
	}
	n := uint64(es)
	for i, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("shape %v: dim %d is negative", shape, i)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > 1<<63-1 {
			return 0, fmt.Errorf("shape %v of %s: byte size overflows int64", shape, dtype)
		}
		n = lo
	}
	return int64(n), nil
}

// readInts reads a JSON array of at most max non-negative integers.
func readInts(dec *json.Decoder, max int) ([]int64, error) {
	if err := expectDelim(dec, '['); err != nil {
		return nil, err
	}
	out := []int64{}
	for dec.More() {
		if len(out) == max {
			return nil, fmt.Errorf("more than %d entries", max)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, fmt.Errorf("entry %d: want an integer, got %s", len(out), describe(tok))
		}
		v, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("entry %d: %s is not a non-negative 64-bit integer", len(out), num)
		}
		out = append(out, v)
	}
	if err := expectDelim(dec, ']'); err != nil {
		return nil, err
	}
	return out, nil
}

// readStringMap reads a JSON object whose values are all strings, rejecting
// duplicate keys.
func readStringMap(dec *json.Decoder) (map[string]string, error) {
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	m := map[string]string{}
	for dec.More() {
		key, err := readKey(dec)
		if err != nil {
			return nil, err
		}
		if _, dup := m[key]; dup {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		v, err := readString(dec)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", key, err)
		}
		m[key] = v
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, err
	}
	return m, nil
}

// readKey reads an object key; the decoder only yields strings there, but
// checking keeps a decoder quirk from becoming a panic.
func readKey(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("want an object key, got %s", describe(tok))
	}
	return s, nil
}

func readString(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("want a string, got %s", describe(tok))
	}
	return s, nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return fmt.Errorf("unexpected end of JSON, want %q", want)
		}
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %q, got %s", want, describe(tok))
	}
	return nil
}

// describe names a JSON token for error messages without echoing a
// possibly huge string in full.
func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		return strconv.Quote(string(v))
	case string:
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return "string " + strconv.Quote(v)
	case json.Number:
		return "number " + string(v)
	case bool:
		return "bool " + strconv.FormatBool(v)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}
