package exec

import (
	"errors"
	"fmt"
)

// Hidden returns the final hidden state of every row of the last step: the
// input of the output head (for llama-style graphs, after the final norm),
// rows × width values in row order. The step must have computed every row
// (a Batch with Hidden, ForwardHidden, or a LogitsAll runner): otherwise
// the last block runs on the logit rows only, as llama.cpp's graph does.
// The slice is the runner's own and changes on the next step.
func (r *Runner) Hidden() (h []float32, width int, err error) {
	if !r.allRows && !r.opt.LogitsAll {
		return nil, 0, errors.New("the last step computed the hidden state of its logit rows only (ask with Batch.Hidden)")
	}
	id, err := r.hiddenNode()
	if err != nil {
		return nil, 0, err
	}
	w := r.m.Graph.Nodes[id].Cols
	return r.bufs[id][:r.nRows*w], w, nil
}

// HiddenWidth is the width of Hidden's rows (0 when the graph has none).
func (r *Runner) HiddenWidth() int {
	id, err := r.hiddenNode()
	if err != nil {
		return 0
	}
	return r.m.Graph.Nodes[id].Cols
}

// hiddenNode is the node feeding the logits head, provided no node after it
// reuses its buffer (so it still holds the step's values when the step ends).
func (r *Runner) hiddenNode() (int, error) {
	g := r.m.Graph
	out := &g.Nodes[r.outID]
	if len(out.In) == 0 {
		return 0, errors.New("the logits node has no input")
	}
	id := out.In[0]
	if len(r.bufs[id]) == 0 {
		return 0, fmt.Errorf("the logits input (node %d, %s) has no buffer", id, g.Nodes[id].Op)
	}
	for i := id + 1; i < len(g.Nodes); i++ {
		if b := r.bufs[i]; len(b) > 0 && &b[0] == &r.bufs[id][0] {
			return 0, fmt.Errorf("the hidden state's buffer is reused by node %d (%s)", i, g.Nodes[i].Op)
		}
	}
	return id, nil
}

// ForwardHidden is Forward for at most MaxBatch tokens of sequence 0 that
// also computes every row's final hidden state, and returns it as Hidden
// does.
func (r *Runner) ForwardHidden(tokens []int32) ([]float32, error) {
	if len(tokens) > r.opt.MaxBatch {
		return nil, fmt.Errorf("forward: %d tokens exceed the batch of %d rows", len(tokens), r.opt.MaxBatch)
	}
	r.allRows = true
	defer func() { r.allRows = false }()
	if _, err := r.Forward(tokens); err != nil {
		return nil, err
	}
	h, _, err := r.Hidden()
	return h, err
}
