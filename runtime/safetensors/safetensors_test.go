package safetensors

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// sample is a small valid set of tensors in write order, including a
// scalar, a zero-size tensor and an odd byte count that forces padding
// nowhere but the header.
func sample() []WriteTensor {
	return []WriteTensor{
		{Name: "b.weight", DType: "F32", Shape: []int64{2, 3}, Data: seq(24)},
		{Name: "a.bias", DType: "BF16", Shape: []int64{3}, Data: seq(6)},
		{Name: "empty", DType: "F16", Shape: []int64{0, 4}, Data: nil},
		{Name: "scalar", DType: "I64", Shape: []int64{}, Data: seq(8)},
		{Name: "mask", DType: "BOOL", Shape: []int64{5}, Data: seq(5)},
	}
}

func seq(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

func writeFile(t testing.TB, ts []WriteTensor, md map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, ts, md); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// raw builds a file from a literal header and dataLen zero bytes of data.
func raw(header string, dataLen int) []byte {
	b := make([]byte, 8, 8+len(header)+dataLen)
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, dataLen)...)
}

func parseBytes(b []byte) (*File, error) {
	return Parse(bytes.NewReader(b), int64(len(b)))
}

func TestRoundTrip(t *testing.T) {
	for _, md := range []map[string]string{nil, {}, {"format": "pt", "note": "a \"quoted\" <value>"}} {
		ts := sample()
		b := writeFile(t, ts, md)
		f, err := parseBytes(b)
		if err != nil {
			t.Fatal(err)
		}
		if f.Size != int64(len(b)) {
			t.Errorf("Size = %d, want %d", f.Size, len(b))
		}
		if f.DataAt%8 != 0 {
			t.Errorf("DataAt = %d, not a multiple of 8", f.DataAt)
		}
		if n := binary.LittleEndian.Uint64(b); f.DataAt != 8+int64(n) {
			t.Errorf("DataAt = %d, want 8+%d", f.DataAt, n)
		}
		if !reflect.DeepEqual(f.Metadata, md) {
			t.Errorf("Metadata = %#v, want %#v", f.Metadata, md)
		}
		// Write lays tensors out contiguously in the given order.
		want := map[string]Tensor{}
		off := f.DataAt
		for _, wt := range ts {
			want[wt.Name] = Tensor{Name: wt.Name, DType: wt.DType, Shape: wt.Shape, Offset: off, Size: int64(len(wt.Data))}
			off += int64(len(wt.Data))
		}
		if off != f.Size {
			t.Errorf("data ends at %d, file is %d bytes", off, f.Size)
		}
		if len(f.Tensors) != len(ts) {
			t.Fatalf("got %d tensors, want %d", len(f.Tensors), len(ts))
		}
		for i, got := range f.Tensors {
			if i > 0 {
				p := f.Tensors[i-1]
				if p.Offset > got.Offset || p.Offset == got.Offset && p.Name > got.Name {
					t.Errorf("tensors not sorted: %q@%d before %q@%d", p.Name, p.Offset, got.Name, got.Offset)
				}
			}
			w := want[got.Name]
			if got.DType != w.DType || got.Offset != w.Offset || got.Size != w.Size || len(got.Shape) != len(w.Shape) {
				t.Errorf("tensor %+v, want %+v", got, w)
			}
			for j := range w.Shape {
				if got.Shape[j] != w.Shape[j] {
					t.Errorf("tensor %q shape %v, want %v", got.Name, got.Shape, w.Shape)
				}
			}
			for _, wt := range ts {
				if wt.Name == got.Name && !bytes.Equal(b[got.Offset:got.Offset+got.Size], wt.Data) {
					t.Errorf("tensor %q data differs", got.Name)
				}
			}
		}
	}
}

func TestWriteMetadataFirst(t *testing.T) {
	b := writeFile(t, sample()[:1], map[string]string{"format": "pt"})
	hdr := string(b[8:])
	if !strings.HasPrefix(hdr, `{"__metadata__":{"format":"pt"},"b.weight":`) {
		t.Errorf("header starts %q", hdr[:60])
	}
}

func TestWriteRejects(t *testing.T) {
	cases := map[string][]WriteTensor{
		"empty name":    {{Name: "", DType: "U8", Shape: []int64{1}, Data: []byte{1}}},
		"reserved name": {{Name: "__metadata__", DType: "U8", Shape: []int64{1}, Data: []byte{1}}},
		"duplicate":     {{Name: "a", DType: "U8", Shape: []int64{1}, Data: []byte{1}}, {Name: "a", DType: "U8", Shape: []int64{1}, Data: []byte{1}}},
		"unknown dtype": {{Name: "a", DType: "Q4_0", Shape: []int64{1}, Data: []byte{1}}},
		"negative dim":  {{Name: "a", DType: "U8", Shape: []int64{-1}, Data: nil}},
		"size":          {{Name: "a", DType: "F32", Shape: []int64{2}, Data: []byte{1, 2, 3}}},
		"bad utf8":      {{Name: "a\xff", DType: "U8", Shape: []int64{1}, Data: []byte{1}}},
	}
	for name, ts := range cases {
		if err := Write(&bytes.Buffer{}, ts, nil); err == nil {
			t.Errorf("%s: Write succeeded", name)
		}
	}
}

func TestDTypeSize(t *testing.T) {
	for dt, want := range map[string]int{"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1} {
		if n, ok := DTypeSize(dt); !ok || n != want {
			t.Errorf("DTypeSize(%q) = %d, %v; want %d", dt, n, ok, want)
		}
	}
	if _, ok := DTypeSize("f32"); ok {
		t.Error("dtype names are case-sensitive")
	}
}

// TestParseValidEdges covers files that look odd but follow the spec.
func TestParseValidEdges(t *testing.T) {
	cases := map[string][]byte{
		"empty header object":    raw(`{}`, 0),
		"padded header":          raw(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}      `, 2),
		"gap between tensors":    raw(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[3,4]}}`, 4),
		"zero-size shares":       raw(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},"c":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1),
		"zero-size at end":       raw(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[1,1]},"c":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1),
		"field order free":       raw(`{"a":{"data_offsets":[0,4],"shape":[2],"dtype":"F16"}}`, 4),
		"metadata only":          raw(`{"__metadata__":{"k":"v"}}`, 0),
		"escaped name":           raw(`{"\u0061\n":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1),
		"whitespace in the JSON": raw("{ \"a\" :\n{\"dtype\":\"U8\",\t\"shape\":[1],\"data_offsets\":[0,1]} }", 1),
	}
	for name, b := range cases {
		if _, err := parseBytes(b); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestParseHostile(t *testing.T) {
	huge := make([]byte, 16)
	binary.LittleEndian.PutUint64(huge, 1<<62)
	overLimit := make([]byte, 16)
	binary.LittleEndian.PutUint64(overLimit, MaxHeader+1)
	valid := writeFile(t, sample(), nil)

	const u8 = `"dtype":"U8","shape":[1],"data_offsets":[0,1]`
	cases := []struct {
		name string
		b    []byte
		want string // a fragment of the error
	}{
		{"empty file", nil, "shorter than"},
		{"short file", []byte{1, 0, 0}, "shorter than"},
		{"header length past end", raw(`{}`, 0)[:9], "exceeds"},
		{"header length huge", huge, "exceeds"},
		{"header length over MaxHeader", overLimit, "limit"},
		{"empty header", raw(``, 0), "end of JSON"},
		{"not JSON", raw(`hello`, 0), "invalid"},
		{"not an object", raw(`[1,2]`, 0), "want"},
		{"string header", raw(`"x"`, 0), "want"},
		{"truncated object", raw(`{"a":{"dtype":"U8"`, 0), ""},
		{"invalid utf8", raw("{\"\xff\":{}}", 0), "UTF-8"},
		{"duplicate key", raw(`{"a":{`+u8+`},"a":{`+u8+`}}`, 1), "duplicate key \"a\""},
		{"duplicate key via escape", raw(`{"a":{`+u8+`},"\u0061":{`+u8+`}}`, 1), "duplicate"},
		{"duplicate metadata", raw(`{"__metadata__":{},"__metadata__":{}}`, 0), "duplicate"},
		{"duplicate field", raw(`{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), "duplicate"},
		{"duplicate metadata key", raw(`{"__metadata__":{"k":"1","k":"2"}}`, 0), "duplicate"},
		{"empty name", raw(`{"":{`+u8+`}}`, 1), "empty tensor name"},
		{"unknown dtype", raw(`{"a":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,1]}}`, 1), "unknown dtype"},
		{"dtype not string", raw(`{"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}`, 4), "dtype"},
		{"unknown field", raw(`{"a":{`+u8+`,"extra":1}}`, 1), "unknown field"},
		{"missing dtype", raw(`{"a":{"shape":[1],"data_offsets":[0,1]}}`, 1), "missing dtype"},
		{"missing shape", raw(`{"a":{"dtype":"U8","data_offsets":[0,1]}}`, 1), "missing shape"},
		{"missing offsets", raw(`{"a":{"dtype":"U8","shape":[1]}}`, 1), "missing data_offsets"},
		{"tensor not object", raw(`{"a":[1]}`, 0), "tensor \"a\""},
		{"negative dim", raw(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, 0), "non-negative"},
		{"fractional dim", raw(`{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}`, 1), "non-negative"},
		{"dim not a number", raw(`{"a":{"dtype":"U8","shape":["1"],"data_offsets":[0,1]}}`, 1), "integer"},
		{"dim beyond int64", raw(`{"a":{"dtype":"U8","shape":[99999999999999999999],"data_offsets":[0,1]}}`, 1), "64-bit"},
		{"rank too big", raw(`{"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}`, 1), "more than 8"},
		{"size mismatch", raw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 8), "needs 8 bytes"},
		{"size overflow", raw(`{"a":{"dtype":"F32","shape":[4611686018427387905],"data_offsets":[0,4]}}`, 4), "overflow"},
		{"size overflow 2d", raw(`{"a":{"dtype":"F64","shape":[2305843009213693952,1],"data_offsets":[0,0]}}`, 0), "overflow"},
		{"one offset", raw(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[1]}}`, 1), "want [begin, end]"},
		{"three offsets", raw(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, 2), "more than 2"},
		{"negative offset", raw(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}`, 1), "non-negative"},
		{"offsets past end", raw(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, 2), "past the end"},
		{"offsets far past end", raw(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[9223372036854775806,9223372036854775807]}}`, 1), "past the end"},
		{"begin after end", raw(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[2,1]}}`, 2), "begin after end"},
		{"overlap", raw(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, 3), "overlap"},
		{"same range", raw(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"I16","shape":[1],"data_offsets":[0,2]}}`, 2), "overlap"},
		{"nested overlap", raw(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},"c":{"dtype":"U8","shape":[1],"data_offsets":[3,4]}}`, 4), "overlap"},
		{"metadata value not string", raw(`{"__metadata__":{"k":1}}`, 0), "want a string"},
		{"metadata value object", raw(`{"__metadata__":{"k":{"x":"y"}}}`, 0), "want a string"},
		{"metadata not object", raw(`{"__metadata__":"x"}`, 0), "__metadata__"},
		{"metadata null", raw(`{"__metadata__":null}`, 0), "__metadata__"},
		{"trailing garbage", raw(`{}x`, 0), "after the JSON object"},
		{"trailing second object", raw(`{} {}`, 0), "after the JSON object"},
		{"trailing newline", raw("{}\n", 0), "after the JSON object"},
		{"trailing NUL padding", raw("{}\x00\x00", 0), "after the JSON object"},
		{"trailing comma", raw(`{"a":{`+u8+`},}`, 1), "invalid"},
		{"header cut short", valid[:len(valid)-1], "past the end"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := parseBytes(c.b)
			if err == nil {
				t.Fatalf("parsed: %+v", f)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

// Tensor errors name the tensor, so a bad checkpoint is easy to locate.
func TestParseErrorNamesTensor(t *testing.T) {
	_, err := parseBytes(raw(`{"model.layers.3.mlp":{"dtype":"F32","shape":[3],"data_offsets":[0,4]}}`, 4))
	if err == nil || !strings.Contains(err.Error(), `"model.layers.3.mlp"`) {
		t.Errorf("error %v does not name the tensor", err)
	}
}

// A reader shorter than the size it claims must fail, not return zeros.
func TestParseShortReader(t *testing.T) {
	b := writeFile(t, sample(), nil)
	if _, err := Parse(bytes.NewReader(b[:20]), int64(len(b))); err == nil {
		t.Error("parsed a truncated reader")
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "model.safetensors")
	b := writeFile(t, sample(), map[string]string{"format": "pt"})
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if f.Size != int64(len(b)) || len(f.Tensors) != 5 || f.Metadata["format"] != "pt" {
		t.Errorf("Open = %+v", f)
	}
	if _, err := Open(filepath.Join(dir, "missing.safetensors")); err == nil {
		t.Error("opened a missing file")
	}
	if _, err := Open(dir); err == nil {
		t.Error("opened a directory")
	}
	bad := filepath.Join(dir, "bad.safetensors")
	if err := os.WriteFile(bad, raw(`{"a":1}`, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Open(bad) = %v, want an error naming the path", err)
	}
}
