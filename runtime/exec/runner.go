package exec

import (
	"fmt"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/tune"
)

// Options shape a runner.
type Options struct {
	Threads   int  // worker goroutines; 0 = one per CPU
	MaxBatch  int  // most tokens in one step (prompts are fed in chunks of this); 0 = 512
	Context   int  // KV cache positions; 0 = the model's trained context, capped at 4096
	LogitsAll bool // return logits for every row of a step, not only the last
	Sequences int  // independent sequences sharing the planned kernels, each with its own KV slot; 0 = 1
	Device    int  // the CUDA device ordinal runtime/gpuexec opens; the CPU runner ignores it

	// Tune chooses the matmuls' block sizes and worker counts by measuring
	// candidates on each shape's first use (runtime/tune); Off runs the
	// defaults. Results are the same either way.
	Tune tune.Mode
	// TuneDir holds the tuning cache; "" = os.UserCacheDir()/jitllm.
	TuneDir string

	// Mmap keeps the CPU runner reading its weights from the file's memory
	// mapping. Otherwise the first CPU runner over a weight copies it into
	// memory when the runner's matmul weights fit in half the available RAM
	// (faster to stream: resident.go).
	Mmap bool

	// KVType is the KV cache's type: "" or KVF16 (f16 values, llama.cpp's
	// default), or KVQ8_0 (int8 blocks of 32 with an f16 scale: about half
	// the memory, as llama.cpp's -ctk/-ctv q8_0; CPU runner only, head dims
	// a multiple of 32).
	KVType string
}

// Batch is one step over rows from several sequences: row i feeds Tokens[i]
// to sequence Seq[i] at that sequence's next position. The rows of one
// sequence must appear in order; the last Logits rows return logits (put the
// rows whose logits are wanted last).
type Batch struct {
	Tokens []int32
	Seq    []int32
	Logits int
	Hidden bool // compute every row's final hidden state (Runner.Hidden), not only the logit rows'
}

// Runner holds the state of its sequences (KV cache slots, positions) and
// the planned kernels of the graph; a step is one batch of rows, from one
// sequence (Forward) or many (ForwardBatch, for continuous batching).
// Neither allocates once the runner is made.
type Runner struct {
	m     *Model
	opt   Options
	pool  *Pool
	steps []func()

	bufs    [][]float32 // node outputs, planned by liveness
	tokens  []int32     // the current step's token ids
	rowSeq  []int32     // the sequence of each row
	rowPos  []int32     // the position of each row in its sequence
	seqPos  []int       // positions already in each sequence's cache
	seqRows []int       // scratch: rows per sequence in a batch
	nRows   int         // rows in the current step
	outID   int
	outRow  int // first row the logits node computes (the last rows of a step)

	allRows bool // this step computes the final hidden state of every row (hidden.go)

	kv   []layerKV
	qbuf []byte // activation rows quantized for a matmul

	// What qbuf holds: node qSrc's rows [qLo, qHi) as qType, this step.
	qSrc     int
	qType    quant.Type
	qLo, qHi int

	matmuls []*matmul
	tc      *tune.Cache
	ropeCS  []float32 // scratch: each row's rope cos/sin pairs
	attnQQ  []byte    // scratch: the step's queries quantized to Q8_0 (a q8_0 cache's attention)
	attnQD  []float32 // and their blocks' scales
}

// layerKV is one layer's cache; only its type's arrays are allocated.
type layerKV struct {
	k, v   []uint16 // f16: [Sequences][Context][KVHeads*HeadDim], as llama.cpp keeps them
	kq, vq []byte   // q8_0: int8 quants, laid out as k and v
	ks, vs []uint16 // q8_0: the f16 scale of each block of 32 values, [Sequences][Context][dim/32]
	dim    int
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
	if opt.MaxBatch > opt.Context*max(opt.Sequences, 1) {
		opt.MaxBatch = opt.Context * max(opt.Sequences, 1)
	}
	if opt.Sequences <= 0 {
		opt.Sequences = 1
	}
	if err := CheckKVType(m.Graph, opt.KVType); err != nil {
		return nil, err
	}
	opt.KVType, _ = ParseKVType(opt.KVType)
	m.settle(opt.Mmap)
	r := &Runner{m: m, opt: opt, pool: NewPool(opt.Threads), tokens: make([]int32, opt.MaxBatch),
		rowSeq: make([]int32, opt.MaxBatch), rowPos: make([]int32, opt.MaxBatch), seqPos: make([]int, opt.Sequences), seqRows: make([]int, opt.Sequences)}
	if err := r.plan(); err != nil {
		r.pool.Close()
		return nil, err
	}
	return r, nil
}

// Close stops the runner's workers.
func (r *Runner) Close() { r.pool.Close() }

// Pos is the number of positions already in sequence 0's cache.
func (r *Runner) Pos() int { return r.seqPos[0] }

// SeqPos is the number of positions already in sequence seq's cache.
func (r *Runner) SeqPos(seq int) int { return r.seqPos[seq] }

// Sequences is the number of sequence slots.
func (r *Runner) Sequences() int { return r.opt.Sequences }

// Context is the KV cache's capacity in positions.
func (r *Runner) Context() int { return r.opt.Context }

// Truncate forgets sequence 0's positions from n on (to rewind it or reuse a prefix).
func (r *Runner) Truncate(n int) { r.TruncateSeq(0, n) }

// TruncateSeq forgets sequence seq's positions from n on; 0 frees the slot.
func (r *Runner) TruncateSeq(seq, n int) {
	if seq >= 0 && seq < len(r.seqPos) && n >= 0 && n < r.seqPos[seq] {
		r.seqPos[seq] = n
	}
}

// Forward feeds tokens to sequence 0 at its next positions and returns the
// logits of the last one (of every row of the last chunk with LogitsAll).
// The slice is the runner's own and changes on the next call.
func (r *Runner) Forward(tokens []int32) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("forward: no tokens")
	}
	if p := r.seqPos[0]; p+len(tokens) > r.opt.Context {
		return nil, fmt.Errorf("%d tokens at position %d exceed the context of %d positions", len(tokens), p, r.opt.Context)
	}
	if r.opt.LogitsAll && len(tokens) > r.opt.MaxBatch {
		return nil, fmt.Errorf("%d tokens exceed the batch of %d rows needed to return every row's logits", len(tokens), r.opt.MaxBatch)
	}
	if err := r.checkTokens(tokens); err != nil {
		return nil, err
	}
	var out []float32
	for len(tokens) > 0 {
		n := min(len(tokens), r.opt.MaxBatch)
		copy(r.tokens, tokens[:n])
		for i := 0; i < n; i++ {
			r.rowSeq[i] = 0
		}
		logits := 1
		if r.opt.LogitsAll {
			logits = n
		}
		out = r.step(n, logits)
		tokens = tokens[n:]
	}
	return out, nil
}

// ForwardRows feeds tokens to sequence 0 as one step and returns the
// logits of every row, row after row: what speculative decoding checks its
// drafted tokens against. At most MaxBatch tokens. The slice is the
// runner's own and changes on the next call.
func (r *Runner) ForwardRows(tokens []int32) ([]float32, error) {
	n := len(tokens)
	switch {
	case n == 0:
		return nil, fmt.Errorf("forward: no tokens")
	case n > r.opt.MaxBatch:
		return nil, fmt.Errorf("forward: %d rows exceed the batch of %d", n, r.opt.MaxBatch)
	case r.seqPos[0]+n > r.opt.Context:
		return nil, fmt.Errorf("%d tokens at position %d exceed the context of %d positions", n, r.seqPos[0], r.opt.Context)
	}
	if err := r.checkTokens(tokens); err != nil {
		return nil, err
	}
	copy(r.tokens, tokens)
	clear(r.rowSeq[:n])
	return r.step(n, n), nil
}

// ForwardBatch runs one step over rows of several sequences and returns the
// logits of the last b.Logits rows, row after row.
func (r *Runner) ForwardBatch(b Batch) ([]float32, error) {
	n := len(b.Tokens)
	switch {
	case n == 0:
		return nil, fmt.Errorf("forward: no tokens")
	case len(b.Seq) != n:
		return nil, fmt.Errorf("forward: %d tokens but %d sequence ids", n, len(b.Seq))
	case n > r.opt.MaxBatch:
		return nil, fmt.Errorf("forward: %d rows exceed the batch of %d", n, r.opt.MaxBatch)
	case b.Logits < 0 || b.Logits > n:
		return nil, fmt.Errorf("forward: %d logit rows of %d", b.Logits, n)
	}
	if err := r.checkTokens(b.Tokens); err != nil {
		return nil, err
	}
	grow := r.seqRows // rows per sequence in this batch
	clear(grow)
	for i, s := range b.Seq {
		if s < 0 || int(s) >= r.opt.Sequences {
			return nil, fmt.Errorf("forward: row %d names sequence %d of %d", i, s, r.opt.Sequences)
		}
		grow[s]++
		if r.seqPos[s]+grow[s] > r.opt.Context {
			return nil, fmt.Errorf("sequence %d: position %d exceeds the context of %d positions", s, r.seqPos[s]+grow[s]-1, r.opt.Context)
		}
	}
	copy(r.tokens, b.Tokens)
	copy(r.rowSeq, b.Seq)
	r.allRows = b.Hidden
	return r.step(n, b.Logits), nil
}

func (r *Runner) checkTokens(tokens []int32) error {
	embd := r.m.Weights[r.m.Graph.Nodes[r.embedNode()].Weight].Dims[1]
	for _, t := range tokens {
		if t < 0 || int64(t) >= embd {
			return fmt.Errorf("token id %d is outside the vocabulary of %d", t, embd)
		}
	}
	return nil
}

// step runs the planned kernels over the n rows already in r.tokens and
// r.rowSeq, giving each row its sequence's next position; the last logits
// rows return logits.
func (r *Runner) step(n, logits int) []float32 {
	for i := 0; i < n; i++ {
		s := r.rowSeq[i]
		r.rowPos[i] = int32(r.seqPos[s])
		r.seqPos[s]++
	}
	r.nRows = n
	r.outRow = n - logits
	r.qSrc = -1
	for _, s := range r.steps {
		s()
	}
	return r.bufs[r.outID][:logits*r.m.VocabSize()]
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
	bp := g.PlanBuffers(rows)
	slots := make([][]float32, len(bp.Sizes))
	for i, n := range bp.Sizes {
		slots[i] = make([]float32, n)
	}
	r.bufs = make([][]float32, len(g.Nodes))
	for i, n := range g.Nodes {
		if s := bp.Slot[i]; s >= 0 {
			r.bufs[i] = slots[s][:rows*n.Cols]
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
			size := r.opt.Sequences * r.opt.Context * dim
			r.kv[n.Layer] = newLayerKV(r.opt.KVType, size, dim)
		}
	}
	r.qbuf = make([]byte, rows*maxQ)
	return nil
}

// tuneCache is the tuning cache the runner's options name.
func (r *Runner) tuneCache() *tune.Cache {
	if r.tc == nil {
		if r.opt.TuneDir != "" {
			r.tc = tune.At(r.opt.TuneDir)
		} else {
			r.tc = tune.Default()
		}
	}
	return r.tc
}

// MaxBatch is the most rows one step carries.
func (r *Runner) MaxBatch() int { return r.opt.MaxBatch }
