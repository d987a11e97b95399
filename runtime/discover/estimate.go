package discover

import (
	"fmt"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/weights"
)

// Options are the run settings an estimate depends on, as exec.Options
// names them; zero values take exec's defaults.
type Options struct {
	Context  int    // KV cache positions; 0 = the model's trained context, capped at 4096
	MaxBatch int    // rows per step; 0 = 512 (never more than Context)
	KVType   string // KV cache type (exec.KVF16, exec.KVQ8_0); "" = f16
}

// Overhead is the fixed memory a jitllm process needs beyond the model: the
// Go runtime, the code, the tokenizer's tables and the sampler.
const Overhead = 64 << 20

// Estimate is the memory a model needs to run, by part.
type Estimate struct {
	Context  int `json:"context"`
	MaxBatch int `json:"max_batch"`
	// Weights are every tensor the graph binds (a CPU runner copies its
	// matmul weights into RAM when they fit, else they stay mapped).
	Weights int64 `json:"weights_bytes"`
	// KV is the KV cache: 2 × layers × context × kv_dim values, 2 bytes
	// each in f16, 34 bytes a 32 in q8_0 (KVType).
	KV     int64  `json:"kv_cache_bytes"`
	KVType string `json:"kv_cache_type"`
	// Activations are the planned node buffers and the kernels' scratch.
	Activations int64 `json:"activations_bytes"`
	// Graph is the graph, its bound weights and the plan's bookkeeping.
	Graph    int64 `json:"graph_bytes"`
	Overhead int64 `json:"overhead_bytes"`
	Total    int64 `json:"total_bytes"`
}

// Load is what exec.Load and exec.NewRunner take: Total without the fixed
// process overhead.
func (e Estimate) Load() int64 { return e.Weights + e.KV + e.Activations + e.Graph }

// resolve applies exec's defaults to o for a model of trained context ctx.
func (o Options) resolve(trained int) Options {
	if o.MaxBatch <= 0 {
		o.MaxBatch = 512
	}
	if o.Context <= 0 {
		o.Context = trained
		if o.Context <= 0 || o.Context > 4096 {
			o.Context = 4096
		}
	}
	if o.MaxBatch > o.Context {
		o.MaxBatch = o.Context
	}
	return o
}

// EstimateMemory is what running g (built for src) with opt needs, by the
// same plan runtime/exec makes: node buffers reused by liveness (best fit),
// a KV cache of opt's type per attention layer, the matmul input rows
// quantized to each weight type's dot partner, and the norm and rope
// vectors decoded.
func EstimateMemory(g *dsl.G, src weights.Source, opt Options) (Estimate, error) {
	trained, _ := src.Meta().Uint(g.Arch + ".context_length")
	opt = opt.resolve(int(trained))
	kvType, err := exec.ParseKVType(opt.KVType)
	if err != nil {
		return Estimate{}, err
	}
	e := Estimate{Context: opt.Context, MaxBatch: opt.MaxBatch, KVType: kvType, Overhead: Overhead}
	types := make([]quant.Type, len(g.Weights))
	for i, w := range g.Weights {
		t, ok := src.Tensor(w.GGUF)
		if !ok {
			return e, fmt.Errorf("model file lacks tensor %s", w.GGUF)
		}
		types[i] = t.Type
		e.Weights += t.Size
	}
	rows := int64(opt.MaxBatch)
	ctx := int64(opt.Context)

	// Node buffers, planned as exec.Runner.plan plans them.
	for _, n := range g.PlanBuffers(int(rows)).Sizes {
		e.Activations += 4 * int64(n)
	}

	// KV cache and scratch.
	var maxQ, maxAttn, maxRope int64
	vec := func(wi int) int64 {
		if wi < 0 {
			return 0
		}
		return 4 * g.Weights[wi].Dims[0]
	}
	kvLayers := map[int]int64{}
	for _, n := range g.Nodes {
		switch n.Op {
		case dsl.OpMatMul:
			w := g.Weights[n.Weight]
			b, err := quant.RowBytes(quant.VecDotType(types[n.Weight]), w.Dims[0])
			if err == nil {
				maxQ = max(maxQ, b)
			}
		case dsl.OpAttention:
			kvLayers[n.Layer] = int64(n.Attn.KVHeads * n.Attn.HeadDim)
			maxAttn = max(maxAttn, int64(n.Cols))
		case dsl.OpRoPE:
			maxRope = max(maxRope, int64(n.Rope.Dims))
			e.Activations += vec(n.Rope.FreqsW)
		case dsl.OpRMSNorm, dsl.OpLayerNorm:
			e.Activations += vec(n.Weight) + vec(n.Bias)
		}
	}
	kv := exec.KVLayout{Type: kvType} // the rows exec's cache keeps per position
	for _, dim := range kvLayers {
		kv.Dims = append(kv.Dims, int(dim))
	}
	e.KV = ctx * int64(kv.BytesPerToken())
	e.Activations += rows*maxQ + 4*rows*maxAttn + 4*rows*maxRope + 4*rows // quantized rows, f16 queries, rope cos/sin, token ids

	// The graph and the plan's bookkeeping: nodes, weights (names, shapes),
	// one kernel closure and buffer header per node.
	e.Graph = int64(len(g.Nodes))*nodeBytes + int64(len(g.Weights))*weightBytes
	e.Total = e.Load() + e.Overhead
	return e, nil
}

// Per-node and per-weight bookkeeping, as measured on the llama graph (the
// dsl.Node, its inputs, the runner's closure, buffer header and liveness
// entries; the dsl.Weight with its names and the bound view).
const (
	nodeBytes   = 512
	weightBytes = 384
)
