package exec

import (
	"fmt"

	"github.com/jitllm/jitllm/dsl"
)

// Options shape a runner.
type Options struct {
	Threads   int  // worker goroutines; 0 = one per CPU
	MaxBatch  int  // most tokens in one step (prompts are fed in chunks of this); 0 = 512
	Context   int  // KV cache positions; 0 = the model's trained context, capped at 4096
	LogitsAll bool // return logits for every row of a step, not only the last
}

// Runner holds one sequence's state (KV cache, position) and the planned
// kernels of the graph. Forward allocates nothing once the runner is made.
type Runner struct {
	m     *Model
	opt   Options
	pool  *Pool
	steps []func()

	bufs   [][]float32 // node outputs, planned by liveness
	tokens []int32     // the current step's token ids
	nRows  int         // rows in the current step
	pos    int         // position of the current step's first row
	outID  int
	outRow int // first row the logits node computes (last row only, unless LogitsAll)

	kv     []layerKV
	qbuf   []byte    // activation rows quantized for a matmul
	qh     []float32 // attention queries rounded to f16
	ropeCS []float32 // cos/sin table of the current rows
}

type layerKV struct {
	k, v []uint16 // [Context][KVHeads*HeadDim], f16 as llama.cpp keeps them
	dim  int
}

// NewRunner plans m's graph for opt.
func NewRunner(m *Model, opt Options) (*Runner, error) {
	if opt.MaxBatch <= 0 {
		opt.MaxBatch = 512
	}
	if opt.Context <= 0 {
		opt.Context = m.ContextLength()
		if opt.Context <= 0 || opt.Context > 4096 {
			opt.Context = 4096
		}
	}
	if opt.MaxBatch > opt.Context {
		opt.MaxBatch = opt.Context
	}
	r := &Runner{m: m, opt: opt, pool: NewPool(opt.Threads), tokens: make([]int32, opt.MaxBatch)}
	if err := r.plan(); err != nil {
		r.pool.Close()
		return nil, err
	}
	return r, nil
}

// Close stops the runner's workers.
func (r *Runner) Close() { r.pool.Close() }

// Pos is the number of positions already in the KV cache.
func (r *Runner) Pos() int { return r.pos }

// Context is the KV cache's capacity in positions.
func (r *Runner) Context() int { return r.opt.Context }

// Truncate forgets positions from n on (to rewind a sequence or reuse a prefix).
func (r *Runner) Truncate(n int) {
	if n >= 0 && n < r.pos {
		r.pos = n
	}
}

// Forward feeds tokens at the next positions and returns the logits of the
// last one (of every row of the last chunk with LogitsAll). The slice is the
// runner's own and changes on the next call.
func (r *Runner) Forward(tokens []int32) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("forward: no tokens")
	}
	if r.pos+len(tokens) > r.opt.Context {
		return nil, fmt.Errorf("%d tokens at position %d exceed the context of %d positions", len(tokens), r.pos, r.opt.Context)
	}
	if r.opt.LogitsAll && len(tokens) > r.opt.MaxBatch {
		return nil, fmt.Errorf("%d tokens exceed the batch of %d rows needed to return every row's logits", len(tokens), r.opt.MaxBatch)
	}
	vocab := r.m.VocabSize()
	embd := r.m.Weights[r.m.Graph.Nodes[r.embedNode()].Weight].Dims[1]
	for _, t := range tokens {
		if t < 0 || int64(t) >= embd {
			return nil, fmt.Errorf("token id %d is outside the vocabulary of %d", t, embd)
		}
	}
	var out []float32
	for len(tokens) > 0 {
		n := min(len(tokens), r.opt.MaxBatch)
		r.nRows = copy(r.tokens, tokens[:n])
		r.outRow = r.nRows - 1
		if r.opt.LogitsAll {
			r.outRow = 0
		}
		for _, s := range r.steps {
			s()
		}
		r.pos += n
		tokens = tokens[n:]
		out = r.bufs[r.outID][:(r.nRows-r.outRow)*vocab]
	}
	return out, nil
}

func (r *Runner) embedNode() int {
	for i, n := range r.m.Graph.Nodes {
		if n.Op == dsl.OpEmbed {
			return i
		}
	}
	return 0
}

// plan assigns every node a buffer (reusing those whose values are dead)
// and lowers it to a kernel closure.
func (r *Runner) plan() error {
	g := r.m.Graph
	rows := r.opt.MaxBatch
	r.outID = g.Outputs["logits"]
	last := make([]int, len(g.Nodes))
	for i, n := range g.Nodes {
		last[i] = i
		for _, in := range n.In {
			last[in] = i
		}
	}
	for _, id := range g.Outputs {
		last[id] = len(g.Nodes)
	}
	type slot struct {
		buf  []float32
		free bool
	}
	var slots []*slot
	owner := make([]*slot, len(g.Nodes))
	r.bufs = make([][]float32, len(g.Nodes))
	for i, n := range g.Nodes {
		if n.Op == dsl.OpTokens {
			continue
		}
		need := rows * n.Cols
		var s *slot
		for _, c := range slots {
			if c.free && len(c.buf) >= need && (s == nil || len(c.buf) < len(s.buf)) {
				s = c
			}
		}
		if s == nil {
			s = &slot{buf: make([]float32, need)}
			slots = append(slots, s)
		}
		s.free = false
		owner[i] = s
		r.bufs[i] = s.buf[:need]
		for _, in := range n.In {
			if last[in] == i && owner[in] != nil {
				owner[in].free = true
			}
		}
	}
	maxQ := 0
	for i, n := range g.Nodes {
		st, err := r.lower(i, &n)
		if err != nil {
			return fmt.Errorf("node %d (%s): %w", i, n.Op, err)
		}
		r.steps = append(r.steps, st)
		if n.Op == dsl.OpMatMul {
			maxQ = max(maxQ, r.qRowBytes(&n))
		}
		if n.Op == dsl.OpAttention {
			if r.kv == nil {
				r.kv = make([]layerKV, g.Layers)
			}
			if n.Layer < 0 || n.Layer >= len(r.kv) {
				return fmt.Errorf("attention node in block %d of %d", n.Layer, g.Layers)
			}
			dim := n.Attn.KVHeads * n.Attn.HeadDim
			r.kv[n.Layer] = layerKV{k: make([]uint16, r.opt.Context*dim), v: make([]uint16, r.opt.Context*dim), dim: dim}
			r.qh = grow(r.qh, rows*n.Cols)
		}
		if n.Op == dsl.OpRoPE {
			r.ropeCS = grow(r.ropeCS, rows*n.Rope.Dims)
		}
	}
	r.qbuf = make([]byte, rows*maxQ)
	return nil
}

func grow(b []float32, n int) []float32 {
	if len(b) >= n {
		return b
	}
	return make([]float32, n)
}
