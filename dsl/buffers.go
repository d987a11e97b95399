package dsl

// BufferPlan assigns every node's value (rows × Cols float32) a slot,
// reusing a slot once the value in it is dead: the one liveness plan the CPU
// backend, the CUDA backend and the memory estimate all use.
type BufferPlan struct {
	Slot  []int // per node, its slot; -1 for nodes without a buffer (tokens)
	Sizes []int // per slot, its length in elements
}

// PlanBuffers plans g's node buffers for steps of rows rows. A value lives
// from its node to its last reader (outputs to the end); a new value takes
// the smallest free slot that holds it, else a new slot.
func (g *G) PlanBuffers(rows int) BufferPlan { return g.PlanBuffersLate(rows, nil) }

// PlanBuffersLate is PlanBuffers for a backend that does some nodes' work
// later than their place: late[i] lists values node i reads besides its
// inputs (those of a node whose work moved into node i), which live until
// node i.
func (g *G) PlanBuffersLate(rows int, late map[int][]int) BufferPlan {
	last := make([]int, len(g.Nodes))
	for i, n := range g.Nodes {
		last[i] = i
		for _, in := range n.In {
			last[in] = i
		}
	}
	for i, ins := range late {
		for _, in := range ins {
			last[in] = max(last[in], i)
		}
	}
	for _, id := range g.Outputs {
		last[id] = len(g.Nodes)
	}
	p := BufferPlan{Slot: make([]int, len(g.Nodes))}
	var free []bool
	for i, n := range g.Nodes {
		p.Slot[i] = -1
		if n.Op == OpTokens {
			continue
		}
		need := rows * n.Cols
		s := -1
		for c, size := range p.Sizes {
			if free[c] && size >= need && (s < 0 || size < p.Sizes[s]) {
				s = c
			}
		}
		if s < 0 {
			s = len(p.Sizes)
			p.Sizes = append(p.Sizes, need)
			free = append(free, false)
		}
		free[s] = false
		p.Slot[i] = s
		for _, in := range append(n.In[:len(n.In):len(n.In)], late[i]...) {
			if last[in] == i && p.Slot[in] >= 0 {
				free[p.Slot[in]] = true
			}
		}
	}
	return p
}
