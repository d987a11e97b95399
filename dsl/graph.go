// Package dsl is the language in which model graphs are written once. A
// family's Build function calls the builder G with plain Go control flow;
// the result is a flat list of nodes over a small closed op set, plus the
// weights and hyperparameters the graph declared. Backends lower that list
// (runtime/exec for the CPU); go generate traces it for the converter and
// capabilities tables.
package dsl

import (
	"fmt"
)

// Op is one operation of the closed op set. A model quirk is built from
// these; the set grows only when a new primitive is truly needed.
type Op uint8

const (
	OpTokens    Op = iota // input: token ids of the rows in the step
	OpEmbed               // rows of weight A gathered by token id
	OpMatMul              // y[r] = W · x[r]; W stored in any ggml type
	OpAdd                 // elementwise a + b
	OpMul                 // elementwise a * b
	OpScale               // a * F
	OpSiLU                // x * sigmoid(x)
	OpGELU                // tanh-approximated GELU
	OpRMSNorm             // x / sqrt(mean(x²) + F) · weight (weight optional), over groups of K values (K 0: the row)
	OpLayerNorm           // (x - mean) / sqrt(var + F) · weight + bias
	OpRoPE                // rotary position embedding per head
	OpAttention           // causal attention of q over this layer's KV cache after appending k, v
	OpSoftmax             // softmax over each row
	OpTopK                // indices of the K largest values per row (MoE routing), as float ids
	OpRows                // input: hidden-state rows an earlier stage computed (stage.go)
)

var opNames = [...]string{"tokens", "embed", "matmul", "add", "mul", "scale", "silu", "gelu", "rms_norm", "layer_norm", "rope", "attention", "softmax", "top_k", "rows"}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", o)
}

// Ops lists the op set in order (for docs and the capabilities table).
func Ops() []Op {
	out := make([]Op, len(opNames))
	for i := range out {
		out[i] = Op(i)
	}
	return out
}

// RoPE modes, as ggml numbers them.
const (
	RopeNormal = 0 // rotate adjacent pairs (x[2i], x[2i+1]): llama as GGUF stores it
	RopeNeox   = 2 // rotate halves (x[i], x[i+n/2]): GPT-NeoX, Qwen, HF llama layout
)

// T is a handle to a value in the graph: a matrix of Rows() rows (one per
// token of the step) by Cols columns of float32.
type T struct {
	id int
	g  *G
}

// ID is the node index.
func (t T) ID() int { return t.id }

// Cols is the row width.
func (t T) Cols() int { return t.g.Nodes[t.id].Cols }

// Node is one operation in the flat graph.
type Node struct {
	Op     Op
	In     []int // argument node ids
	Weight int   // weight index (-1 when none)
	Bias   int   // second weight (layer norm bias), -1 when none
	Cols   int   // width of the result
	Layer  int   // transformer block, -1 outside blocks
	F      float32
	Rope   RopeParams
	Attn   AttnParams
	K      int // top_k: how many; rms_norm: group width (0 = the whole row)
}

// RopeParams configure OpRoPE.
type RopeParams struct {
	Heads     int     // heads in the row
	HeadDim   int     // values per head
	Dims      int     // leading values of each head that rotate
	Base      float32 // frequency base θ
	Mode      int     // RopeNormal or RopeNeox
	FreqsW    int     // optional weight of per-pair frequency divisors (-1 none)
	FreqScale float32 // linear position scale (1 = none)
}

// AttnParams configure OpAttention.
type AttnParams struct {
	Heads, KVHeads, HeadDim int
	Scale                   float32
}

// G builds one graph. Errors are collected so Build code reads straight;
// the first one is returned by Build.
type G struct {
	Arch    string
	Nodes   []Node
	Weights []*Weight
	Outputs map[string]int
	Hyper   *Hyper
	Layers  int // blocks declared
	env     Env

	err    error
	byName map[string]int
}

// NewG starts a graph for architecture arch reading hyperparameters from h.
func NewG(arch string, h *Hyper) *G {
	return &G{Arch: arch, Hyper: h, Outputs: map[string]int{}, byName: map[string]int{}}
}

// Err returns the first error met while building.
func (g *G) Err() error {
	if g.err != nil {
		return g.err
	}
	return g.Hyper.Err()
}

func (g *G) fail(format string, args ...any) {
	if g.err == nil {
		g.err = fmt.Errorf(format, args...)
	}
}

// nd is a node with no weights attached.
func nd(op Op, cols int, in ...T) Node {
	n := Node{Op: op, Cols: cols, Weight: -1, Bias: -1, Layer: -1}
	n.Rope.FreqsW = -1
	for _, t := range in {
		n.In = append(n.In, t.id)
	}
	return n
}

func (g *G) add(n Node) T {
	g.Nodes = append(g.Nodes, n)
	return T{len(g.Nodes) - 1, g}
}

// elementwise is a node in the same block as its first input.
func (g *G) elementwise(n Node, a T) T {
	n.Layer = g.layerOf(a)
	return g.add(n)
}

func (g *G) same(op Op, a, b T) {
	if a.Cols() != b.Cols() {
		g.fail("%s: widths differ (%d vs %d)", op, a.Cols(), b.Cols())
	}
}

// Tokens is the step's input: one row per token.
func (g *G) Tokens() T { return g.add(nd(OpTokens, 1)) }

// Embed gathers rows of w (shape [cols, vocab]) by token id.
func (g *G) Embed(w *Weight, tokens T) T {
	if w == nil {
		g.fail("embed: missing weight")
		return tokens
	}
	n := nd(OpEmbed, int(w.Dims[0]), tokens)
	n.Weight = w.Index
	return g.add(n)
}

// MatMul multiplies each row of x by w (ggml shape [in, out]), giving rows of out.
func (g *G) MatMul(w *Weight, x T) T {
	if w == nil {
		g.fail("matmul: missing weight")
		return x
	}
	if int(w.Dims[0]) != x.Cols() {
		g.fail("matmul %s: weight rows are %d wide, input is %d", w.GGUF, w.Dims[0], x.Cols())
	}
	n := nd(OpMatMul, int(w.Dims[1]), x)
	n.Weight, n.Layer = w.Index, w.Layer
	return g.add(n)
}

// Add, Mul, Scale, SiLU, GELU, Softmax are elementwise or per-row primitives.
func (g *G) Add(a, b T) T {
	g.same(OpAdd, a, b)
	return g.elementwise(nd(OpAdd, a.Cols(), a, b), a)
}
func (g *G) Mul(a, b T) T {
	g.same(OpMul, a, b)
	return g.elementwise(nd(OpMul, a.Cols(), a, b), a)
}
func (g *G) Scale(a T, f float32) T {
	n := nd(OpScale, a.Cols(), a)
	n.F = f
	return g.elementwise(n, a)
}
func (g *G) SiLU(a T) T {
	return g.elementwise(nd(OpSiLU, a.Cols(), a), a)
}
func (g *G) GELU(a T) T {
	return g.elementwise(nd(OpGELU, a.Cols(), a), a)
}
func (g *G) Softmax(a T) T {
	return g.elementwise(nd(OpSoftmax, a.Cols(), a), a)
}

// TopK returns, per row, the ids of the k largest values (MoE routing).
func (g *G) TopK(a T, k int) T {
	if k <= 0 || k > a.Cols() {
		g.fail("top_k: k=%d out of range for width %d", k, a.Cols())
	}
	n := nd(OpTopK, k, a)
	n.K = k
	return g.elementwise(n, a)
}

// RMSNorm normalizes each row by its root mean square, then scales by w (if not nil).
func (g *G) RMSNorm(x T, w *Weight, eps float32) T {
	n := nd(OpRMSNorm, x.Cols(), x)
	n.F, n.Layer = eps, g.layerOf(x)
	if w != nil {
		if int(w.Dims[0]) != x.Cols() {
			g.fail("rms_norm %s: weight is %d wide, input is %d", w.GGUF, w.Dims[0], x.Cols())
		}
		n.Weight, n.Layer = w.Index, w.Layer
	}
	return g.add(n)
}

// RMSNormGroups normalizes each width-wide group of each row on its own
// (per-head q/k norm: qwen3, gemma3), scaling every group by the same w of
// width values (if not nil).
func (g *G) RMSNormGroups(x T, w *Weight, eps float32, width int) T {
	if width <= 0 || x.Cols()%width != 0 {
		g.fail("rms_norm: groups of %d do not tile rows of %d", width, x.Cols())
		return x
	}
	n := nd(OpRMSNorm, x.Cols(), x)
	n.F, n.Layer, n.K = eps, g.layerOf(x), width
	if width == x.Cols() {
		n.K = 0
	}
	if w != nil {
		if int(w.Dims[0]) != width {
			g.fail("rms_norm %s: weight is %d wide, groups are %d", w.GGUF, w.Dims[0], width)
		}
		n.Weight, n.Layer = w.Index, w.Layer
	}
	return g.add(n)
}

// Group is the width of the norm's groups: K, or the whole row.
func (n *Node) Group() int {
	if n.Op == OpRMSNorm && n.K > 0 {
		return n.K
	}
	return n.Cols
}

// LayerNorm normalizes each row to zero mean and unit variance, then applies w and b (each optional).
func (g *G) LayerNorm(x T, w, b *Weight, eps float32) T {
	n := nd(OpLayerNorm, x.Cols(), x)
	n.F, n.Layer = eps, g.layerOf(x)
	if w != nil {
		n.Weight, n.Layer = w.Index, w.Layer
	}
	if b != nil {
		n.Bias = b.Index
	}
	return g.add(n)
}

// RoPE rotates each head of x by its row's position.
func (g *G) RoPE(x T, p RopeParams, freqs *Weight) T {
	if p.Heads*p.HeadDim != x.Cols() {
		g.fail("rope: %d heads × %d ≠ width %d", p.Heads, p.HeadDim, x.Cols())
	}
	if p.Dims <= 0 || p.Dims > p.HeadDim || p.Dims%2 != 0 {
		g.fail("rope: rotated dims %d invalid for head dim %d", p.Dims, p.HeadDim)
	}
	if p.FreqScale == 0 {
		p.FreqScale = 1
	}
	p.FreqsW = -1
	if freqs != nil {
		p.FreqsW = freqs.Index
	}
	n := nd(OpRoPE, x.Cols(), x)
	n.Rope = p
	return g.elementwise(n, x)
}

// Attention appends k and v to the cache of layer and attends q over it causally.
func (g *G) Attention(layer int, q, k, v T, p AttnParams) T {
	if q.Cols() != p.Heads*p.HeadDim || k.Cols() != p.KVHeads*p.HeadDim || v.Cols() != p.KVHeads*p.HeadDim {
		g.fail("attention: widths q %d k %d v %d do not match %d/%d heads of %d", q.Cols(), k.Cols(), v.Cols(), p.Heads, p.KVHeads, p.HeadDim)
	}
	if p.KVHeads == 0 || p.Heads%p.KVHeads != 0 {
		g.fail("attention: %d heads is not a multiple of %d KV heads", p.Heads, p.KVHeads)
	}
	n := nd(OpAttention, q.Cols(), q, k, v)
	n.Attn, n.Layer = p, layer
	return g.add(n)
}

// Output names a result of the graph ("logits", "embedding").
func (g *G) Output(name string, t T) { g.Outputs[name] = t.id }

func (g *G) layerOf(t T) int { return g.Nodes[t.id].Layer }
