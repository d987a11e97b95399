package exec

import (
	"fmt"

	"github.com/jitllm/jitllm/dsl"
)

// Stage is m with its graph cut to blocks [lo, hi) (dsl.G.Stage): the same
// bound weights, a graph that reads hidden rows (after block 0) and returns
// hidden rows (before the last block). NewRunner plans it as any model;
// StageStep runs it.
func (m *Model) Stage(lo, hi int) (*Model, error) {
	g, err := m.Graph.Stage(lo, hi)
	if err != nil {
		return nil, err
	}
	return &Model{Src: m.Src, Graph: g, Weights: m.Weights, res: m.res}, nil
}

// StageWidth is the width of a stage's input rows (0 when it takes tokens)
// and of its output rows (0 when it returns logits).
func (m *Model) StageWidth() (in, out int) {
	g := m.Graph
	if i := g.StageInput(); i >= 0 {
		in = g.Nodes[i].Cols
	}
	if o, ok := g.Outputs[dsl.StageOutput]; ok {
		out = g.Nodes[o].Cols
	}
	return in, out
}

// StageStep runs n rows of sequence 0 at its next positions through the
// runner's stage: toks feed a first stage's embedding, in (n rows of the
// previous stage's output) a later stage's rows node. It returns every
// row's hidden state (n × width) for a stage that ends before the last
// block, else the last row's logits, as Forward of one chunk does, so a
// chain of stages stepped with the same rows gives Forward's numbers bit
// for bit. The slice is the runner's own and changes on the next step.
func (r *Runner) StageStep(toks []int32, in []float32, n int) ([]float32, error) {
	g := r.m.Graph
	inW, outW := r.m.StageWidth()
	switch {
	case n <= 0 || n > r.opt.MaxBatch:
		return nil, fmt.Errorf("stage step of %d rows (1 to %d)", n, r.opt.MaxBatch)
	case r.seqPos[0]+n > r.opt.Context:
		return nil, fmt.Errorf("%d rows at position %d exceed the context of %d positions", n, r.seqPos[0], r.opt.Context)
	case r.opt.LogitsAll:
		return nil, fmt.Errorf("stage step: a runner with LogitsAll returns every row's logits; plan stages without it")
	}
	if inW > 0 {
		if len(in) < n*inW {
			return nil, fmt.Errorf("stage step: %d input values for %d rows of %d", len(in), n, inW)
		}
		copy(r.bufs[g.StageInput()][:n*inW], in[:n*inW])
	} else {
		if len(toks) != n {
			return nil, fmt.Errorf("stage step: %d tokens for %d rows", len(toks), n)
		}
		if err := r.checkTokens(toks); err != nil {
			return nil, err
		}
		copy(r.tokens, toks)
	}
	for i := 0; i < n; i++ {
		r.rowSeq[i] = 0
	}
	if outW == 0 {
		return r.step(n, 1), nil
	}
	// Every row goes on to the next stage: no output-rows-only shortcut.
	r.allRows = true
	r.step(n, n)
	r.allRows = false
	return r.bufs[g.Outputs[dsl.StageOutput]][:n*outW], nil
}
