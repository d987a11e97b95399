package graphs

import (
	"testing"

	"github.com/jitllm/jitllm/dsl"
)

// The generated table lists every weight the llama graph reads, with both names.
func TestLlamaTable(t *testing.T) {
	tab, ok := Tables["llama"]
	if !ok {
		t.Fatal("no llama table: run go generate ./...")
	}
	want := map[string]string{
		"token_embd.weight":         "model.embed_tokens.weight",
		"blk.%d.attn_q.weight":      "model.layers.%d.self_attn.q_proj.weight",
		"blk.%d.ffn_down.weight":    "model.layers.%d.mlp.down_proj.weight",
		"output.weight":             "lm_head.weight",
		"output_norm.weight":        "model.norm.weight",
		"blk.%d.ffn_norm.weight":    "model.layers.%d.post_attention_layernorm.weight",
		"blk.%d.attn_output.weight": "model.layers.%d.self_attn.o_proj.weight",
	}
	for g, hf := range want {
		found := false
		for _, w := range tab.Weights {
			if w.GGUF == g {
				found = true
				if w.HF != hf {
					t.Errorf("%s: HF name %q, want %q", g, w.HF, hf)
				}
			}
		}
		if !found {
			t.Errorf("table lacks %s", g)
		}
	}
	q, _, _ := tab.Match("blk.3.attn_q.weight")
	if q == nil || q.Transform != dsl.RopePermute || q.Op != "matmul" {
		t.Errorf("attn_q row %+v", q)
	}
	if o, _, _ := tab.Match("output.weight"); o == nil || !o.Optional || o.Class != dsl.ClassOutput {
		t.Errorf("output row %+v", o)
	}
}

// Every family traces cleanly: shape errors surface at generate time.
func TestFamiliesTrace(t *testing.T) {
	for _, f := range dsl.Families() {
		if _, err := dsl.Trace(f); err != nil {
			t.Error(err)
		}
	}
}
