package synth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/gguf"
	"github.com/jitllm/jitllm/runtime/weights"
)

// readMix reads an anchors .mix.txt: "name source-type [quantized-type]".
func readMix(t *testing.T, path string) (names []string, types map[string]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	types = map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 {
			continue
		}
		ty := fs[1] // unquantized tensors list only their source type
		if len(fs) > 2 {
			ty = fs[2]
		}
		names = append(names, fs[0])
		types[fs[0]] = ty
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names, types
}

// TestMixAnchors checks the plan of each anchored shape against the tensor
// list and types llama-quantize gave the same shapes.
func TestMixAnchors(t *testing.T) {
	for _, c := range []struct {
		file, like string
		ft         FileType
	}{
		{"llama-3.2-1b-Q4_K_M.mix.txt", "llama-3.2-1b", Q4_K_M},
		{"llama-3.2-1b-Q8_0.mix.txt", "llama-3.2-1b", Q8_0},
		{"llama-3.1-8b-Q4_K_M.mix.txt", "llama-3.1-8b", Q4_K_M},
		{"qwen3-0.6b-Q8_0.mix.txt", "qwen3-0.6b", Q8_0},
	} {
		t.Run(c.file, func(t *testing.T) {
			names, want := readMix(t, filepath.Join("../../testdata/anchors", c.file))
			s, err := Like(c.like)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := Plan(Options{Shape: s, Type: c.ft})
			if err != nil {
				t.Fatal(err)
			}
			if len(plan) != len(names) {
				t.Fatalf("plan has %d tensors, the anchor %d", len(plan), len(names))
			}
			for i, p := range plan {
				if p.Name != names[i] {
					t.Errorf("tensor %d is %s, the anchor's %s", i, p.Name, names[i])
				}
				if got := p.Type.String(); !strings.EqualFold(got, want[p.Name]) {
					t.Errorf("%s: %s, llama-quantize gave %s", p.Name, got, want[p.Name])
				}
			}
		})
	}
}

// TestMixQ4KMOtherShapes checks Q4_K_M on the presets without a Q4_K_M
// anchor: Q6_K exactly on the use_more_bits layers' attn_v and ffn_down, and
// on the output projection.
func TestMixQ4KMOtherShapes(t *testing.T) {
	for _, like := range []string{"qwen3-0.6b", "llama-3.2-3b", "tinyllama-1.1b"} {
		s, _ := Like(like)
		plan, err := Plan(Options{Shape: s, Type: Q4_K_M})
		if err != nil {
			t.Fatal(err)
		}
		six := 0
		for _, p := range plan {
			want := quant.Q4_K
			switch {
			case len(p.Dims) == 1:
				want = quant.F32
			case p.Name == "output.weight" || (s.Tied && p.Name == "token_embd.weight"):
				want = quant.Q6_K
			case strings.HasSuffix(p.Name, "attn_v.weight") || strings.HasSuffix(p.Name, "ffn_down.weight"):
				if i := layerOf(p.Name); i < s.Layers/8 || i >= 7*s.Layers/8 || (i-s.Layers/8)%3 == 2 {
					want = quant.Q6_K
					six++
				}
			}
			if p.Type != want {
				t.Errorf("%s %s: %s, want %s", like, p.Name, p.Type, want)
			}
		}
		if six == 0 {
			t.Errorf("%s: no layer got Q6_K", like)
		}
	}
}

// TestMixLlamaQuantize checks TensorType against files llama-quantize wrote
// (testdata/synthetic/tiny256-*: untied, 2 layers, n_embd 256).
func TestMixLlamaQuantize(t *testing.T) {
	for _, c := range []struct {
		file string
		ft   FileType
	}{{"tiny256-Q4_K_M.gguf", Q4_K_M}, {"tiny256-Q8_0.gguf", Q8_0}, {"tiny256-Q4_0.gguf", Q4_0}, {"tiny256-F16.gguf", F16}} {
		f, err := gguf.Open(filepath.Join("../../testdata/synthetic", c.file))
		if err != nil {
			t.Fatal(err)
		}
		_, tied := f.Tensor("output.weight")
		n, _ := f.Meta.Uint("llama.block_count")
		for _, ti := range f.Tensors {
			if got := TensorType(c.ft, ti.Name, ti.Dims[0], len(ti.Dims), int(n), tied); got != ti.Type {
				t.Errorf("%s %s: %s, llama-quantize gave %s", c.file, ti.Name, got, ti.Type)
			}
		}
		f.Close()
	}
}

func TestUseMoreBits(t *testing.T) {
	var got []int
	for i := 0; i < 16; i++ {
		if useMoreBits(i, 16) {
			got = append(got, i)
		}
	}
	if want := []int{0, 1, 4, 7, 10, 13, 14, 15}; !equalInts(got, want) {
		t.Errorf("use_more_bits over 16 layers: %v, want %v", got, want)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func tinyOptions(ft FileType) Options {
	s, _ := Like("llama-3.2-1b")
	s.Vocab = 512 // the real shapes but for the vocabulary, which only the embedding and output see
	return Options{Shape: s, Type: ft, Seed: 7, Layers: 2}
}

// TestSynthLoadsAndRuns writes a 2-layer llama-3.2-1b (vocabulary cut to 512)
// and checks the file tensor by tensor, then loads and runs it.
func TestSynthLoadsAndRuns(t *testing.T) {
	dir := t.TempDir()
	fts := []FileType{Q8_0, Q4_K_M}
	if testing.Short() {
		fts = fts[:1] // Q4_K quantizing is the slow part (seconds on 2 cores)
	}
	for _, ft := range fts {
		o := tinyOptions(ft)
		path := filepath.Join(dir, "m-"+ft.Base().String()+".gguf")
		sum, err := Write(context.Background(), path, o)
		if err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		plan, _ := Plan(o)
		if len(f.Tensors) != len(plan) || sum.Tensors != len(plan) {
			t.Fatalf("%s: file has %d tensors, plan %d", ft, len(f.Tensors), len(plan))
		}
		wantTypes := map[string]quant.Type{
			"token_embd.weight":        quant.Q6_K,
			"blk.0.attn_v.weight":      quant.Q4_K, // use_more_bits(0, 2) is false
			"blk.1.attn_v.weight":      quant.Q6_K,
			"blk.1.ffn_down.weight":    quant.Q6_K,
			"blk.0.attn_q.weight":      quant.Q4_K,
			"blk.1.attn_output.weight": quant.Q4_K,
			"output_norm.weight":       quant.F32,
		}
		if ft == Q8_0 {
			for k, v := range wantTypes {
				if v != quant.F32 {
					wantTypes[k] = quant.Q8_0
				}
			}
		}
		dims := map[string][]int64{
			"token_embd.weight":     {2048, 512},
			"blk.0.attn_q.weight":   {2048, 2048},
			"blk.0.attn_k.weight":   {2048, 512},
			"blk.1.attn_v.weight":   {2048, 512},
			"blk.1.ffn_down.weight": {8192, 2048},
			"blk.1.ffn_up.weight":   {2048, 8192},
			"output_norm.weight":    {2048},
		}
		for i, ti := range f.Tensors {
			p := plan[i]
			if ti.Name != p.Name || ti.Type != p.Type || !equal64(ti.Dims, p.Dims) {
				t.Errorf("%s: tensor %d is %s %s %v, planned %s %s %v", ft, i, ti.Name, ti.Type, ti.Dims, p.Name, p.Type, p.Dims)
			}
			if w, ok := wantTypes[ti.Name]; ok && ti.Type != w {
				t.Errorf("%s: %s is %s, want %s", ft, ti.Name, ti.Type, w)
			}
			if d, ok := dims[ti.Name]; ok && !equal64(ti.Dims, d) {
				t.Errorf("%s: %s has dims %v, want %v", ft, ti.Name, ti.Dims, d)
			}
		}
		if _, ok := f.Tensor("output.weight"); ok {
			t.Errorf("tied model has output.weight")
		}
		for k, want := range map[string]uint64{"llama.block_count": 2, "llama.embedding_length": 2048, "llama.feed_forward_length": 8192,
			"llama.attention.head_count": 32, "llama.attention.head_count_kv": 8, "llama.rope.dimension_count": 64,
			"llama.vocab_size": 512, "llama.context_length": 131072, "general.file_type": uint64(ft),
			"tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0} {
			if got, ok := f.Meta.Uint(k); !ok || got != want {
				t.Errorf("%s = %d (present %v), want %d", k, got, ok, want)
			}
		}
		if b, _ := f.Meta.Float("llama.rope.freq_base"); b != 500000 {
			t.Errorf("rope.freq_base %v", b)
		}
		if toks, _ := f.Meta.Strings("tokenizer.ggml.tokens"); len(toks) != 512 || toks[1] != "<s>" || toks[3] != "<0x00>" {
			t.Errorf("tokens: %d, %q", len(toks), toks[:4])
		}
		// Values: matrices ≈ N(0, 0.02²), norms ≈ 1.
		ti, _ := f.Tensor("blk.0.attn_q.weight")
		data, _ := f.Data(ti)
		row := make([]float32, 2048*4)
		if err := quant.Dequantize(ti.Type, data, row); err != nil {
			t.Fatal(err)
		}
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		if sd := math.Sqrt(ss / float64(len(row))); sd < 0.015 || sd > 0.025 {
			t.Errorf("%s: attn_q std %.4f, want ≈0.02", ft, sd)
		}
		ti, _ = f.Tensor("output_norm.weight")
		data, _ = f.Data(ti)
		norm := make([]float32, 2048)
		quant.Dequantize(ti.Type, data, norm)
		if norm[0] < 0.9 || norm[0] > 1.1 || norm[7] == norm[8] {
			t.Errorf("norm weights %v", norm[:9])
		}
		f.Close()

		src, err := weights.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		m, err := exec.Load(src)
		if err != nil {
			t.Fatalf("%s: exec.Load: %v", ft, err)
		}
		r, err := exec.NewRunner(m, exec.Options{Threads: 2, MaxBatch: 8, Context: 16})
		if err != nil {
			t.Fatal(err)
		}
		logits, err := r.Forward([]int32{1, 300, 42, 7})
		if err != nil {
			t.Fatal(err)
		}
		if len(logits) != 512 {
			t.Errorf("logits %d wide", len(logits))
		}
		for _, v := range logits {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%s: non-finite logit", ft)
			}
		}
		if _, err := r.Forward([]int32{5}); err != nil {
			t.Fatal(err)
		}
		r.Close()
		src.Close()
	}
}

func equal64(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestDeterministic writes the same options twice (with different worker
// counts) and once with another seed.
func TestDeterministic(t *testing.T) {
	sum := func(o Options) [32]byte {
		var b bytes.Buffer
		ts, err := Plan(o)
		if err != nil {
			t.Fatal(err)
		}
		md, err := Metadata(o)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteTo(context.Background(), &b, md, ts, o); err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(b.Bytes())
	}
	// A small shape: the point is the chunking and the streams, not the size.
	o := Options{Type: Q4_K_M, Seed: 3, Threads: 1, Shape: Shape{Arch: "llama", Vocab: 300, Embd: 256, Layers: 3,
		Heads: 4, KVHeads: 2, HeadDim: 64, FF: 2048, Tied: true, RopeBase: 10000, Context: 256, Eps: 1e-5}}
	a := sum(o)
	o.Threads = 3
	if b := sum(o); a != b {
		t.Errorf("same seed, different bytes with 1 and 3 workers")
	}
	o.Seed++
	if c := sum(o); a == c {
		t.Errorf("another seed gave the same bytes")
	}
}

func TestRejects(t *testing.T) {
	if _, err := Like("gpt-5"); err == nil {
		t.Error("unknown preset accepted")
	}
	if _, err := ParseFileType("q3_k_s"); err == nil {
		t.Error("unknown type accepted")
	}
	if ft, err := ParseFileType("Q4_K_M"); err != nil || ft != Q4_K_M {
		t.Errorf("Q4_K_M: %v %v", ft, err)
	}
	o := tinyOptions(Q8_0)
	o.Shape.Vocab = 2
	if _, err := Plan(o); err == nil {
		t.Error("2-token vocabulary accepted")
	}
	// A failed write leaves nothing behind.
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Write(ctx, filepath.Join(dir, "x.gguf"), tinyOptions(Q8_0)); err == nil {
		t.Error("cancelled write succeeded")
	}
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		t.Errorf("cancelled write left %v", es)
	}
}
