package gguf

import (
	"bytes"
	"math/big"
	"os"
	"path/filepath"
	"testing"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/meta"
)

// smallGGUF writes a small valid file for seeds and tests.
func smallGGUF(t testing.TB, align uint32, tensors ...WriteTensor) []byte {
	t.Helper()
	var md meta.Map
	md.Set("general.architecture", meta.Str("llama"))
	if align != 0 {
		md.Set("general.alignment", meta.U32(align))
	}
	md.Set("tokenizer.ggml.tokens", meta.Strs([]string{"<s>", "a"}))
	var buf bytes.Buffer
	if err := Write(&buf, &md, tensors); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rawGGUF builds a file by hand: header, no metadata, the given tensor
// infos (name, type, dims, relative offset), then extra bytes.
type rawTensor struct {
	name string
	typ  quant.Type
	dims []uint64
	off  uint64
}

func rawGGUF(ts []rawTensor, tail []byte) []byte {
	var buf bytes.Buffer
	w := &meta.Writer{W: &buf}
	w.Bytes([]byte(Magic))
	w.U32(3)
	w.U64(uint64(len(ts)))
	w.U64(0)
	for _, t := range ts {
		w.String(t.name)
		w.U32(uint32(len(t.dims)))
		for _, d := range t.dims {
			w.U64(d)
		}
		w.U32(uint32(t.typ))
		w.U64(t.off)
	}
	w.Bytes(tail)
	return buf.Bytes()
}

// Regressions found while fuzzing; the same inputs are seeds under
// testdata/fuzz/.
func TestParseRegressions(t *testing.T) {
	cases := map[string][]byte{
		// The file ends inside the alignment padding before the data
		// section, so the data section has negative size; a tensor at
		// relative offset 0 slipped past the bounds check.
		"data section before end of file": rawGGUF([]rawTensor{{"a", quant.F32, []uint64{1}, 0}}, nil),
		// (2^62+1) F32 elements: the row byte count 4*(2^62+1) wraps to 4,
		// so 4 bytes of data were accepted for 2^62+1 floats.
		"row byte count wraps":        rawGGUF([]rawTensor{{"a", quant.F32, []uint64{1<<62 + 1}, 0}}, make([]byte, 64)),
		"row byte count wraps f64 2d": rawGGUF([]rawTensor{{"a", quant.F64, []uint64{1 << 61, 1}, 0}}, make([]byte, 64)),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			f, err := Parse(bytes.NewReader(b), int64(len(b)))
			if err == nil {
				t.Errorf("parsed: %+v", f.Tensors)
			}
			checkParsed(t, b)
		})
	}
}

// checkParsed asserts everything Parse promises about a file it accepts.
func checkParsed(t *testing.T, b []byte) {
	t.Helper()
	g, err := Parse(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return
	}
	if g.Alignment <= 0 || g.Alignment&(g.Alignment-1) != 0 || g.DataOffset%g.Alignment != 0 {
		t.Fatalf("alignment %d, data offset %d", g.Alignment, g.DataOffset)
	}
	size := int64(len(b))
	for i := range g.Tensors {
		ti := &g.Tensors[i]
		l, ok := quant.LayoutOf(ti.Type)
		if !ok {
			t.Fatalf("tensor %q: unknown type %d", ti.Name, ti.Type)
		}
		elems := big.NewInt(1)
		for _, d := range ti.Dims {
			if d <= 0 {
				t.Fatalf("tensor %q: dimension %d", ti.Name, d)
			}
			elems.Mul(elems, big.NewInt(d))
		}
		if !elems.IsInt64() || elems.Int64() != ti.Elements() {
			t.Fatalf("tensor %q: %v elements, Elements() says %d", ti.Name, elems, ti.Elements())
		}
		if ti.Dims[0]%int64(l.BlockSize) != 0 {
			t.Fatalf("tensor %q: row %d not a multiple of block %d", ti.Name, ti.Dims[0], l.BlockSize)
		}
		want := new(big.Int).Quo(elems, big.NewInt(int64(l.BlockSize)))
		want.Mul(want, big.NewInt(int64(l.BlockBytes)))
		if !want.IsInt64() || want.Int64() != ti.Size {
			t.Fatalf("tensor %q (%s %v): size %d, want %v", ti.Name, ti.Type, ti.Dims, ti.Size, want)
		}
		if ti.Offset < g.DataOffset || ti.Size > size || ti.Offset > size-ti.Size {
			t.Fatalf("tensor %q [%d, +%d) out of bounds (data at %d, file %d)", ti.Name, ti.Offset, ti.Size, g.DataOffset, size)
		}
		if (ti.Offset-g.DataOffset)%g.Alignment != 0 {
			t.Fatalf("tensor %q offset %d misaligned", ti.Name, ti.Offset)
		}
		if got, ok := g.Tensor(ti.Name); !ok || got != ti {
			t.Fatalf("Tensor(%q) lookup failed", ti.Name)
		}
		d, err := g.Data(ti)
		if err != nil || int64(len(d)) != ti.Size {
			t.Fatalf("Data(%q): %d bytes, %v", ti.Name, len(d), err)
		}
	}
	// Writing what was parsed and parsing that gives the same file.
	ws := make([]WriteTensor, len(g.Tensors))
	for i := range g.Tensors {
		ti := &g.Tensors[i]
		d, _ := g.Data(ti)
		ws[i] = WriteTensor{Name: ti.Name, Type: ti.Type, Dims: ti.Dims, Data: Bytes(d)}
	}
	var buf bytes.Buffer
	if err := Write(&buf, g.Meta, ws); err != nil {
		t.Fatalf("re-writing a parsed file: %v", err)
	}
	h, err := Parse(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatalf("re-written file does not parse: %v", err)
	}
	if !h.Meta.Equal(g.Meta) || len(h.Tensors) != len(g.Tensors) {
		t.Fatal("re-written file differs")
	}
	for i := range g.Tensors {
		a, c := &g.Tensors[i], &h.Tensors[i]
		da, _ := g.Data(a)
		dc, _ := h.Data(c)
		if a.Name != c.Name || a.Type != c.Type || a.Size != c.Size || !bytes.Equal(da, dc) {
			t.Fatalf("tensor %d differs after re-writing", i)
		}
	}
}

// FuzzParseStrict checks, for every file Parse accepts, sizes computed
// without overflow, bounds, alignment, lookups and a Write/Parse round trip.
func FuzzParseStrict(f *testing.F) {
	f.Add(smallGGUF(f, 0,
		WriteTensor{Name: "a", Type: quant.F32, Dims: []int64{3, 2}, Data: Bytes(make([]byte, 24))},
		WriteTensor{Name: "b", Type: quant.Q8_0, Dims: []int64{32}, Data: Bytes(make([]byte, 34))}))
	f.Add(smallGGUF(f, 8,
		WriteTensor{Name: "x", Type: quant.F16, Dims: []int64{1, 1, 1, 5}, Data: Bytes(make([]byte, 10))}))
	f.Add(smallGGUF(f, 0))
	for _, pat := range []string{"*.gguf", "*/*.gguf"} {
		m, _ := filepath.Glob(filepath.Join("..", "..", "testdata", pat))
		for _, p := range m {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b[:min(len(b), 4096)])
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkParsed(t, b) })
}
