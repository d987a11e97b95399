package convert

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/graphs/reftest"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/generate"
	"github.com/jitllm/jitllm/runtime/meta"
	"github.com/jitllm/jitllm/runtime/safetensors"
	"github.com/jitllm/jitllm/runtime/synth"
	"github.com/jitllm/jitllm/runtime/tokenizer/tokenizertest"
)

// synthModel writes a two-block F16 synth GGUF of like's small shape
// (reftest.Shape) into dir and loads it.
func synthModel(t testing.TB, like, dir string) (synth.Shape, *exec.Model) {
	t.Helper()
	s := reftest.Shape(t, like, 320) // the tiny tokenizer's 302 tokens padded
	path := filepath.Join(dir, "model.gguf")
	if _, err := synth.Write(context.Background(), path, synth.Options{Shape: s, Type: synth.F16, Seed: 5, Layers: 2}); err != nil {
		t.Fatal(err)
	}
	return s, loadModel(t, path).Exec
}

// loadModel opens a GGUF or .jlm as runtime/generate does (weights bound
// to the graph, the tokenizer built).
func loadModel(t testing.TB, path string) *generate.Model {
	t.Helper()
	m, err := generate.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// writeCheckpoint writes m as a Hugging Face checkpoint of shape s in dir:
// config.json, model.safetensors (q and k rows in HF's rotary layout;
// matrices as dtype, F16 taken as stored, BF16 rounded from them;
// one-dimensional weights F32), the tiny tokenizer and a chat template.
func writeCheckpoint(t testing.TB, m *exec.Model, s synth.Shape, dtype, dir string) {
	writeCheckpointShards(t, m, s, dtype, dir, 1)
}

// writeCheckpointShards is writeCheckpoint with the tensors dealt over
// shards files (more than one: named as transformers names them, with
// model.safetensors.index.json).
func writeCheckpointShards(t testing.TB, m *exec.Model, s synth.Shape, dtype, dir string, shards int) {
	t.Helper()
	cfg := map[string]any{
		"model_type": s.Arch, "architectures": []string{"X"}, "vocab_size": s.Vocab, "hidden_size": s.Embd,
		"intermediate_size": s.FF, "num_hidden_layers": 2, "num_attention_heads": s.Heads,
		"num_key_value_heads": s.KVHeads, "rms_norm_eps": s.Eps, "rope_theta": s.RopeBase,
		"max_position_embeddings": s.Context, "tie_word_embeddings": s.Tied, "torch_dtype": "bfloat16",
	}
	if s.QKNorm {
		cfg["head_dim"] = s.HeadDim
	}
	writeJSON(t, filepath.Join(dir, "config.json"), cfg)
	var ts []safetensors.WriteTensor
	for _, w := range m.Weights {
		if w.HF == "" {
			continue
		}
		shape := make([]int64, len(w.Dims))
		for i, d := range w.Dims {
			shape[len(w.Dims)-1-i] = d
		}
		data, dt := w.Data, "F32"
		switch {
		case len(w.Dims) == 1:
			if w.Type != quant.F32 {
				t.Fatalf("%s: a %v vector", w.GGUF, w.Type)
			}
		case w.Type != quant.F16:
			t.Fatalf("%s: type %v, want F16", w.GGUF, w.Type)
		case dtype == "BF16":
			v := make([]float32, len(w.Data)/2)
			if err := quant.Dequantize(w.Type, w.Data, v); err != nil {
				t.Fatal(err)
			}
			data, dt = make([]byte, 2*len(v)), "BF16"
			for i, x := range v {
				binary.LittleEndian.PutUint16(data[2*i:], bf16(x))
			}
		default:
			dt = "F16"
		}
		if w.Transform == dsl.RopePermute {
			data = unpermute(data, w.Dims, w.TransformN)
		}
		ts = append(ts, safetensors.WriteTensor{Name: w.HF, DType: dt, Shape: shape, Data: data})
	}
	// Mistral's repositories hold consolidated.safetensors beside the
	// shards: not part of the checkpoint
	if err := os.WriteFile(filepath.Join(dir, "consolidated.safetensors"), []byte("not read"), 0o644); err != nil {
		t.Fatal(err)
	}
	// one tensor no graph reads, as checkpoints carry
	ts = append(ts, safetensors.WriteTensor{Name: "model.rotary_emb.inv_freq", DType: "F32", Shape: []int64{2}, Data: make([]byte, 8)})
	weightMap := map[string]string{}
	for k := range shards {
		name := "model.safetensors"
		if shards > 1 {
			name = fmt.Sprintf("model-%05d-of-%05d.safetensors", k+1, shards)
		}
		var part []safetensors.WriteTensor
		for i := k; i < len(ts); i += shards {
			part = append(part, ts[i])
			weightMap[ts[i].Name] = name
		}
		var b bytes.Buffer
		if err := safetensors.Write(&b, part, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if shards > 1 {
		writeJSON(t, filepath.Join(dir, "model.safetensors.index.json"), map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	}
	tok, err := os.ReadFile(filepath.Join("..", "tokenizer", "testdata", "tiny.tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(dir, "tokenizer_config.json"), map[string]any{
		"eos_token": "<|end|>", "chat_template": "{% for m in messages %}{{ m.content }}<|end|>{% endfor %}",
	})
}

// unpermute is ropePermute's inverse: HF row h·hd + j·hd/2 + i is GGUF row
// h·hd + 2i + j.
func unpermute(b []byte, dims []int64, heads int) []byte {
	rowBytes := len(b) / int(dims[1])
	hd := int(dims[1]) / heads
	out := make([]byte, len(b))
	for h := range heads {
		for i := range hd / 2 {
			for j := range 2 {
				src, dst := h*hd+2*i+j, h*hd+j*hd/2+i
				copy(out[dst*rowBytes:(dst+1)*rowBytes], b[src*rowBytes:(src+1)*rowBytes])
			}
		}
	}
	return out
}

// bf16 rounds to the nearest bfloat16, ties to even (torch's .to(bfloat16)).
func bf16(x float32) uint16 {
	u := math.Float32bits(x)
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func logitsOf(t *testing.T, m *exec.Model, prompt []int32) []float32 {
	t.Helper()
	r, err := exec.NewRunner(m, exec.Options{Threads: 2, MaxBatch: len(prompt), Context: 16, LogitsAll: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.Forward(prompt)
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), got...)
}

// TestConvertHFMatchesGGUF converts Hugging Face checkpoints written from
// synth GGUFs (llama, with its rotary row permutation, and qwen3; tied and
// untied output) and checks the .jlm computes what the GGUF does: every
// row's logits bit for bit from F16 matrices, within bf16's rounding from
// BF16 ones, which the .jlm keeps as BF16. It also checks the tokenizer
// (padded to vocab_size), the chat template and the provenance keys.
func TestConvertHFMatchesGGUF(t *testing.T) {
	prompt := []int32{1, 17, 250, 4, 99, 3, 120}
	for _, c := range []struct {
		like, dtype string
		shards      int
	}{
		{"llama-3.2-1b", "F16", 1}, {"qwen3-0.6b", "F16", 3}, {"llama-3.1-8b", "F16", 2}, {"llama-3.1-8b", "BF16", 1},
	} {
		t.Run(fmt.Sprintf("%s-%s-%d", c.like, c.dtype, c.shards), func(t *testing.T) {
			dir := t.TempDir()
			s, ref := synthModel(t, c.like, dir)
			ck := filepath.Join(dir, "checkpoint")
			if err := os.Mkdir(ck, 0o755); err != nil {
				t.Fatal(err)
			}
			writeCheckpointShards(t, ref, s, c.dtype, ck, c.shards)
			out := filepath.Join(dir, "model.jlm")
			var warns []string
			if err := ConvertHF(context.Background(), ck, out, Options{Warn: func(s string) { warns = append(warns, s) }}); err != nil {
				t.Fatal(err)
			}
			if want := map[string]int{"F16": 1, "BF16": 2}[c.dtype]; len(warns) != want || !strings.Contains(warns[0], "model.rotary_emb.inv_freq") ||
				c.dtype == "BF16" && !strings.Contains(warns[1], "-type f16") {
				t.Errorf("warnings %q, want one for the unread tensor (and, with BF16, one for the type)", warns)
			}
			g := loadModel(t, out)
			m, md := g.Exec, g.Src.Meta()
			if toks, _ := md.Get("tokenizer.ggml.tokens"); toks.Len() != s.Vocab {
				t.Errorf("%d tokens, want %d (padded)", toks.Len(), s.Vocab)
			}
			if tpl, _ := md.String("tokenizer.chat_template"); !strings.Contains(tpl, "m.content") {
				t.Errorf("chat template %q", tpl)
			}
			if f, _ := md.String("jlm.source.format"); f != "safetensors" {
				t.Errorf("jlm.source.format %q", f)
			}
			if ft, _ := md.Uint("general.file_type"); ft != map[string]uint64{"F16": 1, "BF16": 32}[c.dtype] {
				t.Errorf("general.file_type %d for %s matrices", ft, c.dtype)
			}
			for _, w := range m.Weights {
				if len(w.Dims) == 2 && w.Type.String() != c.dtype {
					t.Errorf("%s is %v, want %s", w.GGUF, w.Type, c.dtype)
				}
			}
			want, got := logitsOf(t, ref, prompt), logitsOf(t, m, prompt)
			var worst, scale float64
			for i := range want {
				worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
				scale = math.Max(scale, math.Abs(float64(want[i])))
			}
			t.Logf("max |logit − GGUF's| %.3g of max |logit| %.3g", worst, scale)
			if c.dtype == "F16" && worst != 0 || worst > 0.02*scale || math.IsNaN(worst) {
				t.Errorf("logits differ from the GGUF's by %.3g (max |logit| %.3g)", worst, scale)
			}
		})
	}
}

// TestConvertHFRefuses checks that broken checkpoints stop the conversion
// with a reason naming what is wrong, and leave no output behind.
func TestConvertHFRefuses(t *testing.T) {
	s, ref := synthModel(t, "llama-3.2-1b", t.TempDir())
	for _, c := range []struct {
		name, want string
		spoil      func(dir string)
	}{
		{"unknown model_type", "model_type", func(d string) { editConfig(t, d, "model_type", "gpt_oss") }},
		{"no layers", "num_hidden_layers", func(d string) { editConfig(t, d, "num_hidden_layers", 0) }},
		{"uneven groups", "key-value heads", func(d string) { editConfig(t, d, "num_key_value_heads", 3) }},
		{"wrong width", "shape", func(d string) { editConfig(t, d, "intermediate_size", 161) }},
		{"vocabulary too small", "vocab_size", func(d string) { editConfig(t, d, "vocab_size", 100) }},
		{"rope scaling", "rope_scaling", func(d string) { editConfig(t, d, "rope_scaling", map[string]any{"rope_type": "yarn"}) }},
		{"no config", "config.json", func(d string) { os.Remove(filepath.Join(d, "config.json")) }},
		{"no tokenizer", "tokenizer.json", func(d string) { os.Remove(filepath.Join(d, "tokenizer.json")) }},
		{"no weights", "safetensors", func(d string) { os.Remove(filepath.Join(d, "model.safetensors")) }},
		{"a shard missing", "model-00002-of-00002", func(d string) {
			os.Rename(filepath.Join(d, "model.safetensors"), filepath.Join(d, "model-00001-of-00002.safetensors"))
			writeJSON(t, filepath.Join(d, "model.safetensors.index.json"), map[string]any{"weight_map": map[string]string{
				"model.norm.weight": "model-00001-of-00002.safetensors", "lm_head.weight": "model-00002-of-00002.safetensors"}})
		}},
		{"a tensor twice", "both", func(d string) {
			b, _ := os.ReadFile(filepath.Join(d, "model.safetensors"))
			os.WriteFile(filepath.Join(d, "model-copy.safetensors"), b, 0o644)
		}},
		{"truncated weights", "model.safetensors", func(d string) {
			p := filepath.Join(d, "model.safetensors")
			st, _ := os.Stat(p)
			os.Truncate(p, st.Size()-100)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ck := t.TempDir()
			writeCheckpoint(t, ref, s, "F16", ck)
			c.spoil(ck)
			out := filepath.Join(t.TempDir(), "out.jlm")
			err := ConvertHF(context.Background(), ck, out, Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one about %s", err, c.want)
			}
			if left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), "*")); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

func editConfig(t *testing.T, dir, key string, v any) {
	t.Helper()
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg[key] = v
	writeJSON(t, p, cfg)
}

// TestRopeFactorsLlama3 checks rope_freqs.weight for Llama 3.1's
// rope_scaling against values computed independently: below the high
// frequency wavelength 1, above the low one the factor, between the
// smooth interpolation.
func TestRopeFactorsLlama3(t *testing.T) {
	ck := &checkpoint{cfg: hfConfig{HiddenSize: 4096, Heads: 32, RopeTheta: 500000, RopeScaling: map[string]any{
		"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192.0,
	}}}
	f := ck.ropeFactors()
	if len(f) != 64 {
		t.Fatalf("%d factors, want 64", len(f))
	}
	for i, v := range f {
		wave := 2 * math.Pi * math.Pow(500000, float64(2*i)/128)
		var want float64
		switch {
		case wave < 8192/4.0:
			want = 1
		case wave > 8192:
			want = 8
		default:
			s := (8192/wave - 1) / 3
			want = 1 / ((1-s)/8 + s)
		}
		if math.Abs(float64(v)-want) > 1e-5*want {
			t.Errorf("factor %d: %v, want %v", i, v, want)
		}
	}
	if f[0] != 1 || f[63] != 8 {
		t.Errorf("ends %v, %v: want 1 and 8", f[0], f[63])
	}
}

// TestConvertHFMatchesTransformers gates ConvertHF against transformers
// itself: a random-initialized llama (tied, and with Llama 3's rope
// scaling, which ConvertHF turns into rope_freqs.weight) and qwen3 saved
// with save_pretrained, converted, and every row's logits of a prompt
// compared with the model's own. It needs python3 with torch and
// transformers (the GPU machine has them) and skips, saying so, where they
// are absent.
func TestConvertHFMatchesTransformers(t *testing.T) {
	py := reftest.Python(t)
	tok, err := os.ReadFile(filepath.Join("..", "tokenizer", "testdata", "tiny.tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int32{1, 17, 250, 4, 99, 3, 120, 7, 64, 200}
	base := map[string]any{
		"vocab_size": 320, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
		"num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
		"max_position_embeddings": 64, "tie_word_embeddings": true, "attention_bias": false, "mlp_bias": false,
	}
	with := func(kv map[string]any) map[string]any {
		c := map[string]any{}
		for k, v := range base {
			c[k] = v
		}
		for k, v := range kv {
			c[k] = v
		}
		return c
	}
	for _, c := range []struct {
		name, modelType string
		config          map[string]any
	}{
		{"llama", "llama", base},
		{"llama-untied-rope-scaling", "llama", with(map[string]any{"tie_word_embeddings": false, "rope_scaling": map[string]any{
			"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32}})},
		{"qwen3", "qwen3", with(map[string]any{"head_dim": 32, "rope_theta": 1000000.0, "use_sliding_window": false})},
	} {
		t.Run(c.name, func(t *testing.T) {
			ck := t.TempDir()
			cfg, _ := json.Marshal(c.config)
			pj, _ := json.Marshal(prompt)
			ref := reftest.Logits(t, py, filepath.Join("testdata", "hf_checkpoint.py"), ck, c.modelType, string(cfg), string(pj))
			if err := os.WriteFile(filepath.Join(ck, "tokenizer.json"), tok, 0o644); err != nil {
				t.Fatal(err)
			}
			jl := filepath.Join(t.TempDir(), "m.jlm")
			if err := ConvertHF(context.Background(), ck, jl, Options{}); err != nil {
				t.Fatal(err)
			}
			m := loadModel(t, jl).Exec
			got := logitsOf(t, m, prompt)
			reftest.Compare(t, got, len(prompt), 320, ref)
		})
	}
}

// A config's rotary settings are read where each transformers version
// writes them.
func TestHFConfigRopeForms(t *testing.T) {
	for _, c := range []struct {
		json      string
		theta     float64
		scaleType any
	}{
		{`{"rope_theta": 500000, "rope_scaling": {"rope_type": "llama3", "factor": 8}}`, 500000, "llama3"},
		{`{"rope_theta": 10000, "rope_scaling": {"type": "linear", "factor": 2}}`, 10000, "linear"},
		{`{"rope_parameters": {"rope_theta": 1000000, "rope_type": "default"}}`, 1000000, nil},
		{`{"rope_parameters": {"rope_theta": 500000, "rope_type": "llama3", "factor": 8}}`, 500000, "llama3"},
	} {
		var cfg hfConfig
		if err := json.Unmarshal([]byte(c.json), &cfg); err != nil {
			t.Fatal(err)
		}
		cfg.normalize()
		var typ any
		if cfg.RopeScaling != nil {
			typ = cfg.RopeScaling["rope_type"]
		}
		if cfg.RopeTheta != c.theta || typ != c.scaleType {
			t.Errorf("%s: theta %v, scaling %v; want %v, %v", c.json, cfg.RopeTheta, typ, c.theta, c.scaleType)
		}
	}
}

// FuzzHFConfig feeds config.json variants to a checkpoint that is
// otherwise whole: openCheckpoint must refuse or accept without panicking,
// and what it accepts must name an architecture with a graph and the
// config's layer count.
func FuzzHFConfig(f *testing.F) {
	dir := f.TempDir()
	s, ref := synthModel(f, "llama-3.2-1b", dir)
	ck := filepath.Join(dir, "ck")
	if err := os.Mkdir(ck, 0o755); err != nil {
		f.Fatal(err)
	}
	writeCheckpoint(f, ref, s, "F16", ck)
	valid, err := os.ReadFile(filepath.Join(ck, "config.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte(`{"model_type": "llama", "hidden_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 160, "vocab_size": 320, "rope_parameters": {"rope_theta": 1e6, "rope_type": "llama3", "factor": 8}}`))
	f.Add([]byte(`{"model_type": "qwen3", "hidden_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 0, "head_dim": -5, "intermediate_size": 160, "vocab_size": 320}`))
	f.Add([]byte(`{"model_type": "llama", "rope_scaling": {"type": null}}`))
	f.Add([]byte(`[1, 2`))
	f.Fuzz(func(t *testing.T, cfg []byte) {
		d := t.TempDir()
		for _, name := range []string{"model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
			if err := os.Symlink(filepath.Join(ck, name), filepath.Join(d, name)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(d, "config.json"), cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := openCheckpoint(d)
		if err != nil {
			return
		}
		if _, ok := tableOf(c.arch); !ok {
			t.Fatalf("accepted architecture %q without a graph", c.arch)
		}
		if n, _ := c.md.Uint(c.arch + ".block_count"); int(n) != c.cfg.Layers || c.g.Layers != c.cfg.Layers {
			t.Fatalf("block_count %d, graph %d blocks, config %d layers", n, c.g.Layers, c.cfg.Layers)
		}
	})
}

// TestConvertHFStories260K makes a Llama 2 style checkpoint (F32 weights,
// tokenizer.model: a SentencePiece model) of testdata/stories260K.gguf, the
// model llama.cpp's goldens are of, and checks the converted .jlm keeps its
// tokenizer (tokens, scores, types, special ids), encodes a prompt as the
// GGUF does and computes the same logits bit for bit.
func TestConvertHFStories260K(t *testing.T) {
	const gguf = "../../testdata/stories260K.gguf"
	rg := loadModel(t, gguf)
	ref, md := rg.Exec, rg.Src.Meta()
	ck := t.TempDir()
	u := func(k string) int {
		v, ok := md.Uint("llama." + k)
		if !ok {
			t.Fatalf("stories260K lacks llama.%s", k)
		}
		return int(v)
	}
	eps, _ := md.Float("llama.attention.layer_norm_rms_epsilon")
	toks, _ := md.Get("tokenizer.ggml.tokens")
	writeJSON(t, filepath.Join(ck, "config.json"), map[string]any{
		"model_type": "llama", "vocab_size": toks.Len(), "hidden_size": u("embedding_length"), "intermediate_size": u("feed_forward_length"),
		"num_hidden_layers": u("block_count"), "num_attention_heads": u("attention.head_count"), "num_key_value_heads": u("attention.head_count_kv"),
		"rms_norm_eps": eps, "max_position_embeddings": u("context_length"), "tie_word_embeddings": false,
	})
	var ts []safetensors.WriteTensor
	for _, w := range ref.Weights {
		if w.HF == "" {
			continue
		}
		if w.Type != quant.F32 {
			t.Fatalf("%s is %v", w.GGUF, w.Type)
		}
		shape := make([]int64, len(w.Dims))
		for i, d := range w.Dims {
			shape[len(w.Dims)-1-i] = d
		}
		data := w.Data
		if w.Transform == dsl.RopePermute {
			data = unpermute(data, w.Dims, w.TransformN)
		}
		ts = append(ts, safetensors.WriteTensor{Name: w.HF, DType: "F32", Shape: shape, Data: data})
	}
	var b bytes.Buffer
	if err := safetensors.Write(&b, ts, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ck, "model.safetensors"), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ck, "tokenizer.model"), tokenizertest.SentencePiece(md), 0o644); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(ck, "tokenizer_config.json"), map[string]any{"add_bos_token": true, "add_eos_token": false})
	out := filepath.Join(t.TempDir(), "stories.jlm")
	if err := ConvertHF(context.Background(), ck, out, Options{}); err != nil {
		t.Fatal(err)
	}
	cg := loadModel(t, out)
	got := cg.Src.Meta()
	for _, key := range []string{"tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
		"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id"} {
		w, _ := md.Get(key)
		g, ok := got.Get(key)
		if !ok || !g.Equal(w) {
			t.Errorf("%s = %.60s, want %.60s", key, g.String(), w.String())
		}
	}
	want, err1 := rg.Tok.Encode("Once upon a time, there was a little girl", true, false)
	prompt, err2 := cg.Tok.Encode("Once upon a time, there was a little girl", true, false)
	if err1 != nil || err2 != nil || !slices.Equal(prompt, want) {
		t.Fatalf("the prompt encodes to %v (%v), the GGUF's to %v (%v)", prompt, err2, want, err1)
	}
	if a, b := logitsOf(t, ref, prompt), logitsOf(t, cg.Exec, prompt); !slices.Equal(a, b) {
		t.Error("logits differ from the GGUF's")
	}
}

// The chat templates come from tokenizer_config.json (a string, or named
// templates) or, where newer transformers save it, chat_template.jinja.
func TestConvertHFChatTemplates(t *testing.T) {
	for name, c := range map[string]struct {
		config, jinja string
		want          map[string]string
	}{
		"string":      {`{"chat_template": "A"}`, "", map[string]string{"tokenizer.chat_template": "A"}},
		"named":       {`{"chat_template": [{"name": "default", "template": "A"}, {"name": "tool_use", "template": "T"}]}`, "", map[string]string{"tokenizer.chat_template": "A", "tokenizer.chat_template.tool_use": "T"}},
		"jinja":       {`{"add_bos_token": true}`, "J {{ x }}", map[string]string{"tokenizer.chat_template": "J {{ x }}"}},
		"config wins": {`{"chat_template": "A"}`, "J", map[string]string{"tokenizer.chat_template": "A"}},
		"none":        {`{}`, "", map[string]string{"tokenizer.chat_template": ""}},
	} {
		dir := t.TempDir()
		if c.jinja != "" {
			if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte(c.jinja), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ck := &checkpoint{dir: dir}
		md := &meta.Map{}
		if err := ck.chatTemplates(md, []byte(c.config)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for key, want := range c.want {
			if got, _ := md.String(key); got != want {
				t.Errorf("%s: %s = %q, want %q", name, key, got, want)
			}
		}
	}
	if err := (&checkpoint{dir: t.TempDir()}).chatTemplates(&meta.Map{}, []byte(`{"chat_template": 5}`)); err == nil {
		t.Error("a numeric chat_template accepted")
	}
}

// Options.MatrixType writes every matrix in one float type (llama.cpp's
// --outtype): widened exactly, narrowed to nearest even; vectors stay F32.
func TestConvertHFMatrixType(t *testing.T) {
	dir := t.TempDir()
	s, ref := synthModel(t, "llama-3.2-1b", dir)
	ck := filepath.Join(dir, "ck")
	if err := os.Mkdir(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	writeCheckpoint(t, ref, s, "F16", ck)
	values := func(m *exec.Model, name string) []float32 {
		for _, w := range m.Weights {
			if w.GGUF == name {
				v := make([]float32, w.Dims[0]*w.Dims[1])
				if err := quant.Dequantize(w.Type, w.Data, v); err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
		t.Fatalf("no %s", name)
		return nil
	}
	want := values(ref, "blk.1.ffn_down.weight")
	for _, c := range []struct {
		typ  string
		want quant.Type
	}{{"f32", quant.F32}, {"bf16", quant.BF16}, {"f16", quant.F16}} {
		out := filepath.Join(t.TempDir(), "m.jlm")
		if err := ConvertHF(context.Background(), ck, out, Options{MatrixType: c.typ}); err != nil {
			t.Fatal(err)
		}
		m := loadModel(t, out).Exec
		for _, w := range m.Weights {
			if wantType := map[int]quant.Type{1: quant.F32, 2: c.want}[len(w.Dims)]; w.Type != wantType {
				t.Errorf("%s: %s is %v, want %v", c.typ, w.GGUF, w.Type, wantType)
			}
		}
		for i, v := range values(m, "blk.1.ffn_down.weight") {
			w := want[i]
			if c.want == quant.BF16 {
				w = quant.BF16ToF32(quant.F32ToBF16(w))
			}
			if v != w {
				t.Fatalf("%s: value %d is %v, want %v", c.typ, i, v, w)
			}
		}
	}
	if err := ConvertHF(context.Background(), ck, filepath.Join(t.TempDir(), "m.jlm"), Options{MatrixType: "q4_0"}); err == nil || !strings.Contains(err.Error(), "matrix type") {
		t.Errorf("matrix type q4_0: %v", err)
	}
}
