// Package synth writes synthetic GGUF models: a real architecture's shapes
// and metadata with seeded random weights, quantized by jitllm itself with
// llama-quantize's per-tensor type mix. Speed does not depend on the weight
// values, so such a file stands in for the real model in benchmarks
// (docs/perf, testdata/anchors) without downloading it.
package synth

import (
	"fmt"
	"sort"
	"strings"
)

// Shape is a model family member's hyperparameters: everything a GGUF
// loader needs besides the weights' values.
type Shape struct {
	Name      string  // preset name, e.g. "llama-3.2-1b"
	Arch      string  // general.architecture, the prefix of the hyperparameter keys
	SizeLabel string  // general.size_label, e.g. "1B"
	Vocab     int     // vocabulary size (token_embd rows)
	Embd      int     // embedding_length
	Layers    int     // block_count
	Heads     int     // attention.head_count
	KVHeads   int     // attention.head_count_kv
	HeadDim   int     // attention.key_length (= value_length, rope dimension count)
	FF        int     // feed_forward_length
	Tied      bool    // output projection shares token_embd (no output.weight)
	RopeBase  float32 // rope.freq_base
	Context   int     // context_length (trained)
	Eps       float32 // attention.layer_norm_rms_epsilon
	QKNorm    bool    // per-head RMSNorm on q and k (attn_q_norm, attn_k_norm: qwen3)
}

// presets are the published configurations (config.json of each model).
var presets = map[string]Shape{
	"llama-3.2-1b": {Arch: "llama", SizeLabel: "1B", Vocab: 128256, Embd: 2048, Layers: 16, Heads: 32, KVHeads: 8,
		HeadDim: 64, FF: 8192, Tied: true, RopeBase: 500000, Context: 131072, Eps: 1e-5},
	"llama-3.2-3b": {Arch: "llama", SizeLabel: "3B", Vocab: 128256, Embd: 3072, Layers: 28, Heads: 24, KVHeads: 8,
		HeadDim: 128, FF: 8192, Tied: true, RopeBase: 500000, Context: 131072, Eps: 1e-5},
	"llama-3.1-8b": {Arch: "llama", SizeLabel: "8B", Vocab: 128256, Embd: 4096, Layers: 32, Heads: 32, KVHeads: 8,
		HeadDim: 128, FF: 14336, Tied: false, RopeBase: 500000, Context: 131072, Eps: 1e-5},
	"tinyllama-1.1b": {Arch: "llama", SizeLabel: "1.1B", Vocab: 32000, Embd: 2048, Layers: 22, Heads: 32, KVHeads: 4,
		HeadDim: 64, FF: 5632, Tied: false, RopeBase: 10000, Context: 2048, Eps: 1e-5},
	"qwen3-0.6b": {Arch: "qwen3", SizeLabel: "0.6B", Vocab: 151936, Embd: 1024, Layers: 28, Heads: 16, KVHeads: 8,
		HeadDim: 128, FF: 3072, Tied: true, RopeBase: 1000000, Context: 40960, Eps: 1e-6, QKNorm: true},
}

// Presets lists the preset names, sorted.
func Presets() []string {
	out := make([]string, 0, len(presets))
	for k := range presets {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Like returns the preset's shape.
func Like(name string) (Shape, error) {
	s, ok := presets[strings.ToLower(name)]
	if !ok {
		return Shape{}, fmt.Errorf("no preset %q (have %s)", name, strings.Join(Presets(), ", "))
	}
	s.Name = strings.ToLower(name)
	return s, nil
}

// validate checks the shape is one a loader can build.
func (s *Shape) validate() error {
	switch {
	case s.Vocab < 3:
		return fmt.Errorf("vocabulary of %d tokens: need at least unk, bos and eos", s.Vocab)
	case s.Embd <= 0 || s.Layers <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.HeadDim <= 0 || s.FF <= 0:
		return fmt.Errorf("shape %+v has a non-positive size", *s)
	case s.Heads%s.KVHeads != 0:
		return fmt.Errorf("%d heads do not divide into %d KV heads", s.Heads, s.KVHeads)
	case s.HeadDim%2 != 0:
		return fmt.Errorf("head dimension %d is odd (rope rotates pairs)", s.HeadDim)
	}
	return nil
}
