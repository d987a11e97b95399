// Package graphs holds one file per model family, each a Build function in
// the dsl. Registering a family is all it takes for the converter tables,
// the capabilities report and every backend to know it (after go generate).
package graphs

import (
	"math"

	"github.com/jitllm/jitllm/dsl"
)

// The tables are built with the tag jitllm_gen set, so a stale or broken
// zz_tables.go never stops its own regeneration.
//go:generate go run -tags jitllm_gen ../gen/tables -out zz_tables.go

func init() {
	dsl.Register(dsl.Family{
		Name:          "llama",
		Architectures: []string{"llama"},
		Models:        "Llama 2, Llama 3/3.1/3.2, TinyLlama, Mistral (dense), TinyStories",
		Build:         llama,
	})
}

// llama is the pre-norm decoder of Llama 2/3: RMSNorm, rotary attention with
// grouped KV heads, SwiGLU feed-forward, optionally tied output embedding.
func llama(g *dsl.G) {
	h := g.Hyper
	nEmbd := h.Int("embedding_length")
	nLayer := h.Int("block_count")
	nHead := h.Int("attention.head_count")
	nKV := h.IntOr("attention.head_count_kv", nHead)
	nFF := h.Int("feed_forward_length")
	headDim := h.IntOr("attention.key_length", nEmbd/nHead)
	eps := h.FloatOr("attention.layer_norm_rms_epsilon", 1e-5)
	nVocab := h.VocabSize()
	rope := dsl.RopeParams{
		Heads: nHead, HeadDim: headDim,
		Dims:      h.IntOr("rope.dimension_count", headDim),
		Base:      h.FloatOr("rope.freq_base", 10000),
		Mode:      dsl.RopeNormal,
		FreqScale: 1 / h.FloatOr("rope.scaling.factor", 1),
	}
	ropeK := rope
	ropeK.Heads = nKV
	freqs := g.W("rope_freqs.weight", "", dsl.Shape(rope.Dims/2), dsl.Optional, dsl.Shared)
	attn := dsl.AttnParams{Heads: nHead, KVHeads: nKV, HeadDim: headDim, Scale: float32(1 / math.Sqrt(float64(headDim)))}

	embd := g.W("token_embd.weight", "model.embed_tokens.weight", dsl.Shape(nEmbd, nVocab))
	x := g.Embed(embd, g.Tokens())
	for i := 0; i < nLayer; i++ {
		b := g.Block(i)
		n := g.RMSNorm(x, b.W("attn_norm", "input_layernorm", dsl.Shape(nEmbd)), eps)
		q := g.RoPE(g.MatMul(b.W("attn_q", "self_attn.q_proj", dsl.Shape(nEmbd, nHead*headDim), dsl.Permute(nHead)), n), rope, freqs)
		k := g.RoPE(g.MatMul(b.W("attn_k", "self_attn.k_proj", dsl.Shape(nEmbd, nKV*headDim), dsl.Permute(nKV)), n), ropeK, freqs)
		v := g.MatMul(b.W("attn_v", "self_attn.v_proj", dsl.Shape(nEmbd, nKV*headDim)), n)
		a := g.Attention(i, q, k, v, attn)
		x = g.Add(x, g.MatMul(b.W("attn_output", "self_attn.o_proj", dsl.Shape(nHead*headDim, nEmbd)), a))

		n = g.RMSNorm(x, b.W("ffn_norm", "post_attention_layernorm", dsl.Shape(nEmbd)), eps)
		gate := g.SiLU(g.MatMul(b.W("ffn_gate", "mlp.gate_proj", dsl.Shape(nEmbd, nFF)), n))
		up := g.MatMul(b.W("ffn_up", "mlp.up_proj", dsl.Shape(nEmbd, nFF)), n)
		x = g.Add(x, g.MatMul(b.W("ffn_down", "mlp.down_proj", dsl.Shape(nFF, nEmbd)), g.Mul(gate, up)))
	}
	x = g.RMSNorm(x, g.W("output_norm.weight", "model.norm.weight", dsl.Shape(nEmbd)), eps)
	out := g.W("output.weight", "lm_head.weight", dsl.Shape(nEmbd, nVocab), dsl.Optional)
	if out == nil {
		out = embd // tied embeddings
	}
	g.Output("logits", g.MatMul(out, x))
}
