package graphs

import "github.com/jitllm/jitllm/dsl"

func init() {
	dsl.Register(dsl.Family{
		Name:          "qwen3",
		Architectures: []string{"qwen3"},
		Models:        "Qwen3 (dense: 0.6B to 32B)",
		Build:         qwen3,
	})
}

// qwen3 is llama's decoder with an RMSNorm over each head of q and k before
// the rotation (one weight of head_dim shared by the heads), rotary halves
// (NEOX) rather than pairs, and no q/k row permutation in GGUF. Its head
// width is set on its own (key_length 128 with 1024/16 = 64 on 0.6B).
func qwen3(g *dsl.G) {
	d := readDecoder(g.Hyper, 1e-6, 1000000, dsl.RopeNeox)
	embd := g.W("token_embd.weight", "model.embed_tokens.weight", dsl.Shape(d.embd, d.vocab))
	x := g.Embed(embd, g.Tokens())
	q, kv := d.heads*d.headDim, d.kvHeads*d.headDim
	for i := 0; i < d.layers; i++ {
		b := g.Block(i)
		n := g.RMSNorm(x, b.W("attn_norm", "input_layernorm", dsl.Shape(d.embd)), d.eps)
		qh := g.MatMul(b.W("attn_q", "self_attn.q_proj", dsl.Shape(d.embd, q)), n)
		qh = g.RMSNormGroups(qh, b.W("attn_q_norm", "self_attn.q_norm", dsl.Shape(d.headDim)), d.eps, d.headDim)
		kh := g.MatMul(b.W("attn_k", "self_attn.k_proj", dsl.Shape(d.embd, kv)), n)
		kh = g.RMSNormGroups(kh, b.W("attn_k_norm", "self_attn.k_norm", dsl.Shape(d.headDim)), d.eps, d.headDim)
		v := g.MatMul(b.W("attn_v", "self_attn.v_proj", dsl.Shape(d.embd, kv)), n)
		a := g.Attention(i, g.RoPE(qh, d.rope, nil), g.RoPE(kh, d.ropeK, nil), v, d.attn)
		x = g.Add(x, g.MatMul(b.W("attn_output", "self_attn.o_proj", dsl.Shape(q, d.embd)), a))
		x = d.feedForward(g, b, x)
	}
	d.head(g, x, embd)
}
