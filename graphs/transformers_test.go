package graphs_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/jitllm/jitllm/graphs/reftest"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/synth"
)

// hfConfig is the transformers config of a synth shape (the keys of the
// families whose HF layout needs no transform of the GGUF weights).
func hfConfig(s synth.Shape) (modelType string, cfg map[string]any) {
	return s.Arch, map[string]any{
		"vocab_size": s.Vocab, "hidden_size": s.Embd, "intermediate_size": s.FF,
		"num_hidden_layers": 2, "num_attention_heads": s.Heads, "num_key_value_heads": s.KVHeads,
		"head_dim": s.HeadDim, "rms_norm_eps": s.Eps, "rope_theta": s.RopeBase,
		"tie_word_embeddings": s.Tied, "max_position_embeddings": 64,
		"attention_bias": false, "use_sliding_window": false,
	}
}

// writeHF writes m's weights under their Hugging Face names in the layout
// testdata/hf_logits.py reads.
func writeHF(t *testing.T, m *exec.Model, s synth.Shape, tokens []int32, path string) {
	type tensor struct {
		Offset int   `json:"offset"`
		Shape  []int `json:"shape"`
	}
	mt, cfg := hfConfig(s)
	head := struct {
		ModelType string            `json:"model_type"`
		Config    map[string]any    `json:"config"`
		Tokens    []int32           `json:"tokens"`
		Tensors   map[string]tensor `json:"tensors"`
	}{mt, cfg, tokens, map[string]tensor{}}
	var data bytes.Buffer
	for _, w := range m.Weights {
		if w.HF == "" {
			t.Fatalf("%s has no Hugging Face name", w.GGUF)
		}
		shape := make([]int, len(w.Dims)) // torch order: the ggml dims reversed
		for i, d := range w.Dims {
			shape[len(w.Dims)-1-i] = int(d)
		}
		head.Tensors[w.HF] = tensor{data.Len(), shape}
		for _, v := range floats(t, m, w.GGUF) {
			binary.Write(&data, binary.LittleEndian, float32(v))
		}
	}
	hj, err := json.Marshal(head)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	binary.Write(&out, binary.LittleEndian, uint64(len(hj)))
	out.Write(hj)
	out.Write(data.Bytes())
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestQwen3MatchesTransformers gates the qwen3 graph against Hugging Face
// transformers' Qwen3ForCausalLM on the same random weights: every row's
// logits of a short prompt. It needs python3 with torch and transformers
// (the GPU machine has them) and skips, saying so, where they are absent.
func TestQwen3MatchesTransformers(t *testing.T) {
	py := reftest.Python(t)
	s := reftest.Shape(t, "qwen3-0.6b", 300)
	m := tinyModel(t, s)
	prompt := []int32{1, 17, 250, 4, 99, 3, 120, 7, 64, 200}
	path := filepath.Join(t.TempDir(), "weights.bin")
	writeHF(t, m, s, prompt, path)
	ref := reftest.Logits(t, py, filepath.Join("testdata", "hf_logits.py"), path)
	r, err := exec.NewRunner(m, exec.Options{Threads: 2, MaxBatch: len(prompt), Context: 16, LogitsAll: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.Forward(prompt)
	if err != nil {
		t.Fatal(err)
	}
	reftest.Compare(t, got, len(prompt), s.Vocab, ref)
}
