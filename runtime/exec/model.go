// Package exec runs a model's graph on the CPU: it lowers each dsl node to a
// kernel specialized for its shapes and weight type, plans every buffer once
// per (graph, batch size), and steps sessions through it without allocating.
package exec

import (
	"fmt"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/meta"
	"github.com/jitllm/jitllm/runtime/weights"

	_ "github.com/jitllm/jitllm/graphs" // every family registers itself
)

// Model is a graph bound to the bytes of its weights.
type Model struct {
	Src     weights.Source
	Graph   *dsl.G
	Weights []Bound

	res *residency // which weights CPU runners copied into memory (resident.go)
}

// Bound is one weight with its stored type and data.
type Bound struct {
	*dsl.Weight
	Type quant.Type
	Data []byte
}

// RowBytes is the byte size of one row.
func (b *Bound) RowBytes() int {
	n, _ := quant.RowBytes(b.Type, b.Dims[0])
	return int(n)
}

type env struct{ src weights.Source }

func (e env) Meta() *meta.Map { return e.src.Meta() }
func (e env) Has(name string) bool {
	_, ok := e.src.Tensor(name)
	return ok
}

// Load builds the graph for src's architecture and binds its weights,
// checking each stored shape against the graph's declaration.
func Load(src weights.Source) (*Model, error) {
	g, err := dsl.Build(env{src})
	if err != nil {
		return nil, err
	}
	m := &Model{Src: src, Graph: g, Weights: make([]Bound, len(g.Weights)), res: &residency{settled: make([]bool, len(g.Weights))}}
	matmul := map[int]bool{}
	for _, n := range g.Nodes {
		if n.Op == dsl.OpMatMul {
			matmul[n.Weight] = true
		}
	}
	for i, w := range g.Weights {
		t, ok := src.Tensor(w.GGUF)
		if !ok {
			return nil, fmt.Errorf("model file lacks tensor %s", w.GGUF)
		}
		if !sameShape(t.Dims, w.Dims) {
			return nil, fmt.Errorf("tensor %s has shape %v, the %s graph expects %v", w.GGUF, t.Dims, g.Arch, w.Dims)
		}
		if !quant.CanDequantize(t.Type) || (matmul[i] && !quant.CanVecDot(t.Type)) {
			return nil, fmt.Errorf("tensor %s is %s, which the CPU backend cannot compute yet", w.GGUF, t.Type)
		}
		data, err := src.Data(w.GGUF)
		if err != nil {
			return nil, err
		}
		m.Weights[i] = Bound{Weight: w, Type: t.Type, Data: data}
	}
	return m, nil
}

// sameShape compares ignoring trailing 1s (GGUF may store [n] as [n, 1]).
func sameShape(a, b []int64) bool {
	trim := func(d []int64) []int64 {
		for len(d) > 1 && d[len(d)-1] == 1 {
			d = d[:len(d)-1]
		}
		return d
	}
	a, b = trim(a), trim(b)
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// VocabSize is the width of the logits output (0 for a stage without one).
func (m *Model) VocabSize() int {
	id, ok := m.Graph.Outputs["logits"]
	if !ok {
		return 0
	}
	return m.Graph.Nodes[id].Cols
}

// ContextLength is the trained context, from {arch}.context_length (0 when absent).
func (m *Model) ContextLength() int {
	n, _ := m.Src.Meta().Uint(m.Graph.Arch + ".context_length")
	return int(n)
}

// ZeroModel binds a traced graph (dsl.Trace) to zero F32 weights of the
// declared shapes, so a backend can plan it as it would plan a real model
// (the capabilities generator asks each backend whether it can).
func ZeroModel(g *dsl.G) *Model {
	m := &Model{Graph: g, Weights: make([]Bound, len(g.Weights))}
	for i, w := range g.Weights {
		n := int64(1)
		for _, d := range w.Dims {
			n *= d
		}
		m.Weights[i] = Bound{Weight: w, Type: quant.F32, Data: make([]byte, 4*n)}
	}
	return m
}
