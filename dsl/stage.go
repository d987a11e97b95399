package dsl

import "fmt"

// A stage is the part of a graph that one device runs: the nodes of blocks
// [lo, hi), cut out of the full graph at block boundaries. Its input is the
// one value that crosses the cut before block lo (the residual stream: a
// hidden-state row per token), fed as an OpRows node, and its output,
// "hidden", is the one value crossing the cut before block hi. The first
// stage keeps the token input and embedding; the last keeps the graph's own
// outputs (logits). Every backend runs a stage as it runs any graph, so one
// mechanism serves every split: CPU+CPU, CPU+GPU, GPU+GPU.

// StageOutput is the output name of a stage that ends before the last block.
const StageOutput = "hidden"

// BlockStarts returns, for each block, the index of its first node: the
// cuts a stage can be made at. Blocks must be laid out in order (no node of
// block i after a node of block i+1); nodes outside blocks (Layer -1) may
// sit anywhere.
func (g *G) BlockStarts() ([]int, error) {
	if g.Layers <= 0 {
		return nil, fmt.Errorf("the %s graph has no blocks to cut at", g.Arch)
	}
	starts := make([]int, g.Layers)
	for i := range starts {
		starts[i] = -1
	}
	cur := -1
	for i, n := range g.Nodes {
		if n.Layer < 0 {
			continue
		}
		if n.Layer >= g.Layers {
			return nil, fmt.Errorf("node %d (%s) is in block %d of %d", i, n.Op, n.Layer, g.Layers)
		}
		if n.Layer < cur {
			return nil, fmt.Errorf("node %d (%s) of block %d comes after block %d: blocks are not in order", i, n.Op, n.Layer, cur)
		}
		if n.Layer > cur {
			cur = n.Layer
			starts[cur] = i
		}
	}
	for i, s := range starts {
		if s < 0 {
			return nil, fmt.Errorf("block %d has no nodes", i)
		}
	}
	return starts, nil
}

// crossing is the one value computed before node c that a node from c on
// reads: what a stage boundary at c carries.
func (g *G) crossing(c int) (int, error) {
	id, count := -1, 0
	seen := map[int]bool{}
	for _, n := range g.Nodes[c:] {
		for _, in := range n.In {
			if in < c && !seen[in] {
				seen[in] = true
				id = in
				count++
			}
		}
	}
	switch {
	case count == 0:
		return 0, fmt.Errorf("nothing crosses the cut at node %d", c)
	case count > 1:
		return 0, fmt.Errorf("%d values cross the cut at node %d: a stage boundary carries one (the hidden state)", count, c)
	case g.Nodes[id].Op == OpTokens:
		return 0, fmt.Errorf("the cut at node %d carries token ids, not hidden rows", c)
	}
	return id, nil
}

// Stage returns the graph of blocks [lo, hi) of g (0 ≤ lo < hi ≤ Layers).
// It shares g's weights (indices unchanged) and hyperparameters, and keeps
// g's block numbering, so each stage plans KV caches for its own blocks
// only. A stage that starts after block 0 begins with an OpRows node of the
// crossing width; one that ends before the last block has the single output
// StageOutput. The whole range returns g itself.
func (g *G) Stage(lo, hi int) (*G, error) {
	if lo < 0 || hi > g.Layers || lo >= hi {
		return nil, fmt.Errorf("stage of blocks [%d, %d) is outside the %d blocks of the %s graph", lo, hi, g.Layers, g.Arch)
	}
	if lo == 0 && hi == g.Layers {
		return g, nil
	}
	starts, err := g.BlockStarts()
	if err != nil {
		return nil, err
	}
	start, end := 0, len(g.Nodes)
	s := &G{Arch: g.Arch, Weights: g.Weights, Outputs: map[string]int{}, Hyper: g.Hyper, Layers: g.Layers, env: g.env}
	remap := make(map[int]int, len(g.Nodes))
	if lo > 0 {
		start = starts[lo]
		in, err := g.crossing(start)
		if err != nil {
			return nil, fmt.Errorf("stage from block %d: %w", lo, err)
		}
		n := nd(OpRows, g.Nodes[in].Cols)
		s.Nodes = append(s.Nodes, n)
		remap[in] = 0
	}
	var out int
	if hi < g.Layers {
		end = starts[hi]
		if out, err = g.crossing(end); err != nil {
			return nil, fmt.Errorf("stage to block %d: %w", hi, err)
		}
	}
	for i := start; i < end; i++ {
		n := g.Nodes[i]
		n.In = append([]int(nil), n.In...)
		for k, in := range n.In {
			j, ok := remap[in]
			if !ok {
				// crossing() allows only the one value; anything else is a bug here
				return nil, fmt.Errorf("stage [%d, %d): node %d reads node %d from before the stage", lo, hi, i, in)
			}
			n.In[k] = j
		}
		remap[i] = len(s.Nodes)
		s.Nodes = append(s.Nodes, n)
	}
	if hi < g.Layers {
		s.Outputs[StageOutput] = remap[out]
		return s, nil
	}
	for name, id := range g.Outputs {
		j, ok := remap[id]
		if !ok || id < start {
			return nil, fmt.Errorf("output %q is computed before block %d, outside the last stage", name, lo)
		}
		s.Outputs[name] = j
	}
	return s, nil
}

// StageInput is the OpRows node of a stage graph, -1 when it takes tokens.
func (g *G) StageInput() int {
	for i, n := range g.Nodes {
		if n.Op == OpRows {
			return i
		}
	}
	return -1
}

// WeightsUsed lists the weights g's nodes read (a stage reads only its own
// blocks' and the shared ones), in index order.
func (g *G) WeightsUsed() []int {
	used := make([]bool, len(g.Weights))
	for _, n := range g.Nodes {
		for _, w := range []int{n.Weight, n.Bias, n.Rope.FreqsW} {
			if w >= 0 && w < len(used) {
				used[w] = true
			}
		}
	}
	var out []int
	for i, u := range used {
		if u {
			out = append(out, i)
		}
	}
	return out
}
