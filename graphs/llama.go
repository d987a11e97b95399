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

// decoder holds the hyperparameters every pre-norm rotary decoder reads
// (llama and the families built like it); defaults are the family's.
type decoder struct {
	embd, layers, heads, kvHeads, ff, headDim, vocab int
	eps                                              float32
	rope, ropeK                                      dsl.RopeParams
	attn                                             dsl.AttnParams
}

func readDecoder(h *dsl.Hyper, epsDefault, ropeBase float32, ropeMode int) decoder {
	var d decoder
	d.embd = h.Int("embedding_length")
	d.layers = h.Int("block_count")
	d.heads = h.Int("attention.head_count")
	d.kvHeads = h.IntOr("attention.head_count_kv", d.heads)
	d.ff = h.Int("feed_forward_length")
	d.headDim = h.IntOr("attention.key_length", d.embd/max(d.heads, 1))
	d.eps = h.FloatOr("attention.layer_norm_rms_epsilon", epsDefault)
	d.vocab = h.VocabSize()
	d.rope = dsl.RopeParams{
		Heads: d.heads, HeadDim: d.headDim,
		Dims:      h.IntOr("rope.dimension_count", d.headDim),
		Base:      h.FloatOr("rope.freq_base", ropeBase),
		Mode:      ropeMode,
		FreqScale: 1 / h.FloatOr("rope.scaling.factor", 1),
	}
	d.ropeK = d.rope
	d.ropeK.Heads = d.kvHeads
	d.attn = dsl.AttnParams{Heads: d.heads, KVHeads: d.kvHeads, HeadDim: d.headDim, Scale: float32(1 / math.Sqrt(float64(d.headDim)))}
	return d
}

// feedForward is the SwiGLU block: x + down(silu(gate(n)) · up(n)) with n
// the ffn_norm of x.
func (d *decoder) feedForward(g *dsl.G, b dsl.Block, x dsl.T) dsl.T {
	n := g.RMSNorm(x, b.W("ffn_norm", "post_attention_layernorm", dsl.Shape(d.embd)), d.eps)
	gate := g.SiLU(g.MatMul(b.W("ffn_gate", "mlp.gate_proj", dsl.Shape(d.embd, d.ff)), n))
	up := g.MatMul(b.W("ffn_up", "mlp.up_proj", dsl.Shape(d.embd, d.ff)), n)
	return g.Add(x, g.MatMul(b.W("ffn_down", "mlp.down_proj", dsl.Shape(d.ff, d.embd)), g.Mul(gate, up)))
}

// head is the final norm and the output projection (the token embedding
// when the model ties them).
func (d *decoder) head(g *dsl.G, x dsl.T, embd *dsl.Weight) {
	x = g.RMSNorm(x, g.W("output_norm.weight", "model.norm.weight", dsl.Shape(d.embd)), d.eps)
	out := g.W("output.weight", "lm_head.weight", dsl.Shape(d.embd, d.vocab), dsl.Optional)
	if out == nil {
		out = embd // tied embeddings
	}
	g.Output("logits", g.MatMul(out, x))
}

// llama is the pre-norm decoder of Llama 2/3: RMSNorm, rotary attention with
// grouped KV heads, SwiGLU feed-forward, optionally tied output embedding.
func llama(g *dsl.G) {
	d := readDecoder(g.Hyper, 1e-5, 10000, dsl.RopeNormal)
	freqs := g.W("rope_freqs.weight", "", dsl.Shape(d.rope.Dims/2), dsl.Optional, dsl.Shared)
	embd := g.W("token_embd.weight", "model.embed_tokens.weight", dsl.Shape(d.embd, d.vocab))
	x := g.Embed(embd, g.Tokens())
	q, kv := d.heads*d.headDim, d.kvHeads*d.headDim
	for i := 0; i < d.layers; i++ {
		b := g.Block(i)
		n := g.RMSNorm(x, b.W("attn_norm", "input_layernorm", dsl.Shape(d.embd)), d.eps)
		// GGUF stores q and k rows permuted for adjacent-pair rotation.
		qr := g.RoPE(g.MatMul(b.W("attn_q", "self_attn.q_proj", dsl.Shape(d.embd, q), dsl.Permute(d.heads)), n), d.rope, freqs)
		kr := g.RoPE(g.MatMul(b.W("attn_k", "self_attn.k_proj", dsl.Shape(d.embd, kv), dsl.Permute(d.kvHeads)), n), d.ropeK, freqs)
		v := g.MatMul(b.W("attn_v", "self_attn.v_proj", dsl.Shape(d.embd, kv)), n)
		a := g.Attention(i, qr, kr, v, d.attn)
		x = g.Add(x, g.MatMul(b.W("attn_output", "self_attn.o_proj", dsl.Shape(q, d.embd)), a))
		x = d.feedForward(g, b, x)
	}
	d.head(g, x, embd)
}
