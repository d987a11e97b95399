package dsl

import (
	"fmt"
	"strings"
)

// Transform is a rewrite applied to a weight when it is converted from a
// Hugging Face checkpoint (GGUF files already carry it applied).
type Transform uint8

const (
	NoTransform Transform = iota
	// RopePermute reorders q/k projection rows from HF's half-split rotary
	// layout to the adjacent-pair layout GGUF's llama uses.
	RopePermute
)

func (t Transform) String() string {
	switch t {
	case RopePermute:
		return "rope_permute"
	}
	return "none"
}

// Class says where a weight sits, as ggml's LLM_TENSOR_INFOS does, so buffers
// can be placed before loading.
type Class uint8

const (
	ClassInput     Class = iota // token embedding: read by row, keep on the host
	ClassRepeating              // inside a block: goes where the block goes
	ClassOutput                 // final norm and output projection
)

func (c Class) String() string {
	return [...]string{"input", "repeating", "output"}[c]
}

// Weight is one declared weight of a graph.
type Weight struct {
	Index       int
	GGUF        string  // name in GGUF and .jlm files, e.g. "blk.3.attn_q.weight"
	HF          string  // name in Hugging Face safetensors
	GGUFPattern string  // the same with %d for the block, as tables list it
	HFPattern   string  //
	Layer       int     // block index, -1 outside blocks
	Dims        []int64 // expected ggml shape: Dims[0] is the row length
	Class       Class
	Transform   Transform
	TransformN  int // argument of the transform (heads for RopePermute)
	Optional    bool
}

// Option modifies a weight declaration.
type Option func(*Weight)

// Optional marks a weight that a file may lack; W then returns nil for it.
func Optional(w *Weight) { w.Optional = true }

// Shared marks a weight outside the blocks that every block reads (rope
// frequency factors): it is placed with the blocks.
func Shared(w *Weight) { w.Class = ClassRepeating }

// Permute declares the HF → GGUF rotary row permutation over heads.
func Permute(heads int) Option {
	return func(w *Weight) { w.Transform, w.TransformN = RopePermute, heads }
}

// W declares a weight outside any block (gguf and hf are full names).
func (g *G) W(gguf, hf string, dims []int64, opts ...Option) *Weight {
	class := ClassOutput
	if strings.HasPrefix(gguf, "token_embd") {
		class = ClassInput
	}
	return g.declare(&Weight{GGUF: gguf, HF: hf, GGUFPattern: gguf, HFPattern: hf, Layer: -1, Dims: dims, Class: class}, opts)
}

// Block is the builder of transformer block i.
type Block struct {
	g *G
	I int
}

// Block starts block i; its weights are named blk.i.* and model.layers.i.*.
func (g *G) Block(i int) Block {
	if i+1 > g.Layers {
		g.Layers = i + 1
	}
	return Block{g, i}
}

// W declares a block weight by its short names: "attn_q" becomes
// blk.N.attn_q.weight and "self_attn.q_proj" model.layers.N.self_attn.q_proj.weight.
func (b Block) W(gguf, hf string, dims []int64, opts ...Option) *Weight {
	gp := "blk.%d." + gguf + ".weight"
	hp := "model.layers.%d." + hf + ".weight"
	return b.g.declare(&Weight{
		GGUF: fmt.Sprintf(gp, b.I), HF: fmt.Sprintf(hp, b.I), GGUFPattern: gp, HFPattern: hp,
		Layer: b.I, Dims: dims, Class: ClassRepeating,
	}, opts)
}

func (g *G) declare(w *Weight, opts []Option) *Weight {
	for _, o := range opts {
		o(w)
	}
	if i, ok := g.byName[w.GGUF]; ok {
		return g.Weights[i] // declared twice (tied weights): one weight
	}
	for _, d := range w.Dims {
		if d <= 0 {
			g.fail("weight %s: dimension %d is not positive (shape %v)", w.GGUF, d, w.Dims)
		}
	}
	if !g.env.Has(w.GGUF) {
		if w.Optional {
			return nil
		}
		g.fail("weight %s is missing from the model file", w.GGUF)
	}
	w.Index = len(g.Weights)
	g.byName[w.GGUF] = w.Index
	g.Weights = append(g.Weights, w)
	return w
}

// Has reports whether the model file holds a tensor of that name.
func (g *G) Has(gguf string) bool { return g.env.Has(gguf) }

// Shape is a helper for declaring ggml shapes: Shape(in, out).
func Shape(d ...int) []int64 {
	out := make([]int64, len(d))
	for i, x := range d {
		out[i] = int64(x)
	}
	return out
}
