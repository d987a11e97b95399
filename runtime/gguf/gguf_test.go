package gguf

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/meta"
)

func testdataGGUFs(t testing.TB) []string {
	var out []string
	for _, pat := range []string{"*.gguf", "*/*.gguf"} {
		m, _ := filepath.Glob(filepath.Join("..", "..", "testdata", pat))
		out = append(out, m...)
	}
	if len(out) == 0 {
		t.Fatal("no testdata GGUF files found")
	}
	return out
}

func TestOpenEveryTestdataFile(t *testing.T) {
	for _, p := range testdataGGUFs(t) {
		f, err := Open(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if f.Meta.Len() == 0 {
			t.Errorf("%s: no metadata", p)
		}
		if !strings.Contains(p, "vocab") && len(f.Tensors) == 0 {
			t.Errorf("%s: no tensors", p)
		}
		if toks, ok := f.Meta.Strings("tokenizer.ggml.tokens"); !ok || len(toks) == 0 {
			t.Errorf("%s: no tokenizer.ggml.tokens", p)
		}
		for i := range f.Tensors {
			if _, err := f.Data(&f.Tensors[i]); err != nil {
				t.Errorf("%s: %v", p, err)
			}
		}
		f.Close()
	}
}

func TestStories260KShape(t *testing.T) {
	f, err := Open("../../testdata/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if a := f.Architecture(); a != "llama" {
		t.Fatalf("architecture %q", a)
	}
	if n, _ := f.Meta.Uint("llama.block_count"); n != 5 {
		t.Fatalf("block_count %d", n)
	}
	if got := f.ParamCount(); got != 292800 {
		t.Fatalf("params %d, want 292800", got)
	}
	ti, ok := f.Tensor("token_embd.weight")
	if !ok || ti.Type != quant.F32 || ti.Dims[0] != 64 || ti.Dims[1] != 512 {
		t.Fatalf("token_embd %+v", ti)
	}
}

func TestWriteRoundTrip(t *testing.T) {
	var md meta.Map
	md.Set("general.architecture", meta.Str("llama"))
	md.Set("general.alignment", meta.U32(64))
	md.Set("x.nested", meta.Arr(meta.Array, []meta.Value{meta.I32s([]int32{1, -2}), meta.Strs([]string{"a", "b"})}))
	md.Set("x.f", meta.F32s([]float32{1.5, -2}))
	md.Set("x.b", meta.B(true))
	data := bytes.Repeat([]byte{7}, 34*2)
	var buf bytes.Buffer
	err := Write(&buf, &md, []WriteTensor{
		{Name: "a", Type: quant.Q8_0, Dims: []int64{32, 2}, Data: Bytes(data)},
		{Name: "b", Type: quant.F32, Dims: []int64{3}, Data: Bytes(make([]byte, 12))},
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if !f.Meta.Equal(&md) {
		t.Fatalf("metadata differs")
	}
	a, _ := f.Tensor("a")
	got, _ := f.Data(a)
	if !bytes.Equal(got, data) || a.Offset%64 != 0 {
		t.Fatalf("tensor a: offset %d", a.Offset)
	}
}

// Hostile inputs: each must fail with an error, not a panic or a huge allocation.
func TestHostile(t *testing.T) {
	good, err := os.ReadFile("../../testdata/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	le := func(b []byte, off int, v uint64, n int) []byte {
		c := append([]byte(nil), b...)
		for i := 0; i < n; i++ {
			c[off+i] = byte(v >> (8 * i))
		}
		return c
	}
	cases := map[string]struct {
		data []byte
		want string
	}{
		"empty":            {nil, "not a GGUF"},
		"magic":            {append([]byte("GGUX"), good[4:]...), "magic"},
		"version 1":        {le(good, 4, 1, 4), "version 1"},
		"big endian":       {le(good, 4, 3<<24, 4), "big-endian"},
		"absurd tensors":   {le(good, 8, 1<<60, 8), "tensors"},
		"absurd kv":        {le(good, 16, 1<<60, 8), "metadata entries"},
		"truncated header": {good[:20], "truncated"},
		"truncated data":   {good[:len(good)-100], "past the end"},
		"absurd key len":   {le(good, 24, 1<<40, 8), "string length"},
	}
	for name, c := range cases {
		_, err := Parse(bytes.NewReader(c.data), int64(len(c.data)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want error containing %q", name, err, c.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, p := range testdataGGUFs(f) {
		b, err := os.ReadFile(p)
		if err != nil || len(b) > 1<<20 {
			continue
		}
		f.Add(b[:min(len(b), 4096)])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := Parse(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		for i := range g.Tensors {
			ti := &g.Tensors[i]
			if ti.Offset < g.DataOffset || ti.Offset+ti.Size > int64(len(b)) {
				t.Fatalf("tensor %q out of bounds", ti.Name)
			}
		}
	})
}

// The testdata README records each file's sha256; a changed file is a changed fixture.
func TestTestdataChecksums(t *testing.T) {
	readme, err := os.ReadFile("../../testdata/README.md")
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	for _, line := range strings.Split(string(readme), "\n") {
		fields := strings.FieldsFunc(line, func(r rune) bool { return r == '|' || r == ' ' })
		for i := 0; i+1 < len(fields); i++ {
			a, b := fields[i], fields[i+1]
			if strings.HasSuffix(a, ".gguf") && len(b) == 64 {
				sums[a] = b
			}
			if len(a) == 64 && strings.HasSuffix(b, ".gguf") {
				sums[b] = a
			}
		}
	}
	for _, p := range testdataGGUFs(t) {
		rel, _ := filepath.Rel("../../testdata", p)
		want, ok := sums[rel]
		if !ok {
			want, ok = sums[filepath.Base(p)]
		}
		if !ok {
			t.Errorf("%s: no sha256 in testdata/README.md", rel)
			continue
		}
		b, _ := os.ReadFile(p)
		if got := fmt.Sprintf("%x", sha256.Sum256(b)); got != want {
			t.Errorf("%s: sha256 %s, README says %s", rel, got, want)
		}
	}
}
