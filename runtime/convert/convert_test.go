package convert

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/gguf"
	"github.com/jitllm/jitllm/runtime/jlm"
	"github.com/jitllm/jitllm/runtime/meta"
)

func testdataGGUFs(t testing.TB) []string {
	var out []string
	for _, pat := range []string{"*.gguf", "*/*.gguf"} {
		m, _ := filepath.Glob(filepath.Join("..", "..", "testdata", pat))
		out = append(out, m...)
	}
	if len(out) < 20 {
		t.Fatalf("found only %d testdata GGUF files", len(out))
	}
	return out
}

// checkSame fails unless the .jlm at out holds exactly the GGUF at in: the
// same metadata in the same order plus the provenance keys, and the same
// tensors with the same bytes. sha says whether jlm.source.sha256 was asked for.
func checkSame(t *testing.T, in, out string, sha bool) {
	t.Helper()
	g, err := gguf.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	j, err := jlm.Open(out)
	if err != nil {
		t.Fatalf("%s: %v", in, err)
	}
	defer j.Close()
	want := &meta.Map{}
	for _, kv := range g.Meta.All() {
		want.Set(kv.Key, kv.Value)
	}
	st, _ := os.Stat(in)
	want.Set("jlm.converter", meta.Str(Converter))
	want.Set("jlm.source.format", meta.Str("gguf"))
	want.Set("jlm.source.format_version", meta.U32(g.Version))
	want.Set("jlm.source.file", meta.Str(filepath.Base(in)))
	want.Set("jlm.source.size", meta.U64(uint64(st.Size())))
	raw, _ := os.ReadFile(in)
	want.Set("jlm.source.crc32c", meta.U32(crc32.Checksum(raw, crc32.MakeTable(crc32.Castagnoli))))
	if sha {
		sum := sha256.Sum256(raw)
		want.Set("jlm.source.sha256", meta.Str(hex.EncodeToString(sum[:])))
	}
	if arch, _ := g.Meta.String("general.architecture"); arch == "llama" {
		wantBlocks(want, j.Tensors)
	}
	if !j.Meta.Equal(want) {
		t.Errorf("%s: metadata differs: %d entries, want %d", in, j.Meta.Len(), want.Len())
		for _, kv := range want.All() {
			if v, ok := j.Meta.Get(kv.Key); !ok || !v.Equal(kv.Value) {
				t.Errorf("  %s: got %v, want %v", kv.Key, v, kv.Value)
			}
		}
	}
	if len(j.Tensors) != len(g.Tensors) {
		t.Fatalf("%s: %d tensors, want %d", in, len(j.Tensors), len(g.Tensors))
	}
	for i := range g.Tensors {
		gt := &g.Tensors[i]
		jt, ok := j.Tensor(gt.Name)
		if !ok {
			t.Errorf("%s: tensor %q missing", in, gt.Name)
			continue
		}
		gd, _ := g.Data(gt)
		if jt.Type != gt.Type || !equalDims(jt.Dims, gt.Dims) || !bytes.Equal(j.Data(jt), gd) {
			t.Errorf("%s: tensor %q differs (%s %v vs %s %v)", in, gt.Name, jt.Type, jt.Dims, gt.Type, gt.Dims)
		}
		if jt.Offset%4096 != 0 {
			t.Errorf("%s: tensor %q at unaligned offset %d", in, gt.Name, jt.Offset)
		}
		if err := j.Verify(jt); err != nil {
			t.Error(err)
		}
	}
}

func TestConvertEveryTestdataFile(t *testing.T) {
	dir := t.TempDir()
	for _, in := range testdataGGUFs(t) {
		out := filepath.Join(dir, strings.TrimSuffix(filepath.Base(in), ".gguf")+".jlm")
		var last, total int64
		err := Convert(context.Background(), in, out, Options{SourceSHA256: true, Progress: func(d, n int64) { last, total = d, n }})
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if last != total {
			t.Errorf("%s: progress ended at %d of %d", in, last, total)
		}
		checkSame(t, in, out, true)
	}
	leftovers(t, dir, len(testdataGGUFs(t)))
}

// leftovers fails if dir holds a temporary file or other than n files.
func leftovers(t *testing.T, dir string, n int) {
	t.Helper()
	es, _ := os.ReadDir(dir)
	for _, e := range es {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
	if len(es) != n {
		t.Errorf("%s holds %d files, want %d", dir, len(es), n)
	}
}

// writeGGUF writes a GGUF with a 3-D expert tensor, a 3-D tensor that is
// not one, and a plain matrix; the data is a counting pattern.
func writeGGUF(t testing.TB, path string) {
	md := &meta.Map{}
	md.Set("general.architecture", meta.Str("qwen3moe"))
	md.Set("qwen3moe.expert_count", meta.U32(8))
	ts := []gguf.WriteTensor{
		{Name: "blk.0.ffn_gate_exps.weight", Type: quant.Q8_0, Dims: []int64{64, 4, 8}},
		{Name: "blk.0.attn_k.weight", Type: quant.F16, Dims: []int64{16, 2, 3}},
		{Name: "output.weight", Type: quant.F32, Dims: []int64{8, 8}},
	}
	for i := range ts {
		n, _ := ts[i].Size()
		b := make([]byte, n)
		for k := range b {
			b[k] = byte(k*31 + i)
		}
		ts[i].Data = gguf.Bytes(b)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := gguf.Write(f, md, ts); err != nil {
		t.Fatal(err)
	}
}

func TestExpertRanges(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "moe.gguf"), filepath.Join(dir, "moe.jlm")
	writeGGUF(t, in)
	if err := Convert(context.Background(), in, out, Options{}); err != nil {
		t.Fatal(err)
	}
	checkSame(t, in, out, false)
	g, _ := gguf.Open(in)
	defer g.Close()
	j, err := jlm.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	gt, _ := g.Tensor("blk.0.ffn_gate_exps.weight")
	whole, _ := g.Data(gt)
	jt, _ := j.Tensor(gt.Name)
	if len(jt.Experts) != 8 {
		t.Fatalf("%d experts, want 8", len(jt.Experts))
	}
	es := len(whole) / 8 // 4 rows of 64 Q8_0 values: 4*68 bytes
	if es != 4*68 {
		t.Fatalf("expert size %d", es)
	}
	for i := 0; i < 8; i++ {
		r, err := j.Expert(jt, i)
		if err != nil {
			t.Fatal(err)
		}
		if r.Size != int64(es) || !bytes.Equal(j.Slice(r), whole[i*es:(i+1)*es]) {
			t.Errorf("expert %d: range %+v does not hold its slice", i, r)
		}
		if err := j.VerifyRange(r); err != nil {
			t.Error(err)
		}
	}
	if k, _ := j.Tensor("blk.0.attn_k.weight"); len(k.Experts) != 0 {
		t.Errorf("3-D tensor without _exps got %d experts", len(k.Experts))
	}
}

func TestCancelLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.jlm")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	err := Convert(ctx, "../../testdata/stories260K.gguf", out, Options{BufferSize: 4096, Progress: func(d, n int64) {
		if calls++; d > n/2 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if calls < 3 {
		t.Fatalf("progress called %d times; the cancel did not land midway", calls)
	}
	leftovers(t, dir, 0)
}

// failAfter fails reads past n bytes of the source.
type failAfter struct {
	ra io.ReaderAt
	n  int64
}

var errDisk = errors.New("simulated read error")

func (f failAfter) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.n {
		return 0, errDisk
	}
	return f.ra.ReadAt(p, off)
}

func TestReadErrorLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.jlm")
	wrapSource = func(ra io.ReaderAt) io.ReaderAt { return failAfter{ra, 600 << 10} }
	defer func() { wrapSource = nil }()
	for _, sha := range []bool{false, true} {
		err := Convert(context.Background(), "../../testdata/stories260K.gguf", out, Options{BufferSize: 64 << 10, SourceSHA256: sha})
		if !errors.Is(err, errDisk) {
			t.Fatalf("got %v, want the read error", err)
		}
		leftovers(t, dir, 0)
	}
}

func TestRefuseOverwrite(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.jlm")
	os.WriteFile(out, []byte("keep me"), 0o644)
	err := Convert(context.Background(), "../../testdata/stories260K.gguf", out, Options{})
	if err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("overwrote without Force: %v", err)
	}
	if b, _ := os.ReadFile(out); string(b) != "keep me" {
		t.Fatal("existing file changed")
	}
	if err := Convert(context.Background(), "../../testdata/stories260K.gguf", out, Options{Force: true}); err != nil {
		t.Fatal(err)
	}
	checkSame(t, "../../testdata/stories260K.gguf", out, false)
	leftovers(t, dir, 1)
}

func TestDeterministic(t *testing.T) {
	dir := t.TempDir()
	in := "../../testdata/derived/stories260K-Q4_0.gguf"
	a, b, c := filepath.Join(dir, "a.jlm"), filepath.Join(dir, "b.jlm"), filepath.Join(dir, "c.jlm")
	for _, p := range []string{a, b} {
		if err := Convert(context.Background(), in, p, Options{BufferSize: 1000, SourceSHA256: true}); err != nil {
			t.Fatal(err)
		}
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Error("two conversions of one file differ")
	}
	if err := Convert(context.Background(), in, c, Options{}); err != nil {
		t.Fatal(err)
	}
	checkSame(t, in, c, false)
}

func TestRejectsNonGGUF(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.jlm")
	if err := Convert(context.Background(), "../../testdata/derived/stories260K-Q4_0.gguf", a, Options{}); err != nil {
		t.Fatal(err)
	}
	err := Convert(context.Background(), a, filepath.Join(dir, "b.jlm"), Options{})
	if err == nil || !strings.Contains(err.Error(), "already a .jlm") {
		t.Fatalf("converting a .jlm: %v", err)
	}
	leftovers(t, dir, 1)
}

// wantBlocks adds the block ranges a llama file must record, found here by
// the blk.N. name prefix rather than through the generated table.
func wantBlocks(want *meta.Map, ts []jlm.TensorInfo) {
	var lo, hi []int64
	for _, t := range ts {
		var b int
		if _, err := fmt.Sscanf(t.Name, "blk.%d.", &b); err != nil {
			continue
		}
		for len(lo) <= b {
			lo, hi = append(lo, -1), append(hi, 0)
		}
		if lo[b] < 0 || t.Offset < lo[b] {
			lo[b] = t.Offset
		}
		hi[b] = max(hi[b], t.Offset+t.Size)
	}
	off, size := make([]meta.Value, len(lo)), make([]meta.Value, len(lo))
	for b := range lo {
		off[b], size[b] = meta.U64(uint64(lo[b])), meta.U64(uint64(hi[b]-lo[b]))
	}
	want.Set("jlm.graph.family", meta.Str("llama"))
	want.Set("jlm.block.offset", meta.Arr(meta.Uint64, off))
	want.Set("jlm.block.size", meta.Arr(meta.Uint64, size))
}
