package exec

import (
	"math/bits"
	"time"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/cpugen"
	"github.com/jitllm/jitllm/kernels/cpukern"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/tune"
)

func (r *Runner) qRowBytes(n *dsl.Node) int {
	w := &r.m.Weights[n.Weight]
	b, _ := quant.RowBytes(quant.VecDotType(w.Type), w.Dims[0])
	return int(b)
}

// outputRowsOnly reports whether llama.cpp evaluates matmul node id on the
// output rows only: its llama graph drops every other row (ggml_get_rows on
// inp_out_ids) in the last block right after the attention output
// projection, so the last block's FFN and the output head run with one row
// per returned logit vector (src/models/llama.cpp, "il == n_layer - 1").
func (r *Runner) outputRowsOnly(id int) bool {
	g := r.m.Graph
	lastAttn := -1
	for i, n := range g.Nodes {
		if n.Op == dsl.OpAttention {
			lastAttn = i
		}
	}
	if lastAttn < 0 {
		return false
	}
	wo := -1
	for i := lastAttn + 1; i < len(g.Nodes); i++ {
		if g.Nodes[i].Op == dsl.OpMatMul {
			wo = i
			break
		}
	}
	return wo >= 0 && id > wo
}

// MatMulOrders names the dot-product orders a matmul over weights of type
// t (in inputs, out outputs) runs, for one activation row and for several:
// ggml's CPU backend picks its kernel by the number of rows (ggml-cpu.c
// ggml_compute_forward_mul_mat: llamafile_sgemm for two rows or more, the
// type's vec_dot for one), and the kernels accumulate in different orders;
// each name is the kernels/cpugen function with that order ("" for the
// types kernels/ops does not describe yet, which run quant.VecDot).
func MatMulOrders(t quant.Type, in, out int) (one, many string) {
	// llamafile tinyBLAS needs k%16 == 0 and m%4 == 0 (sgemm.cpp tinyBLAS::matmul).
	sgemmOK := in%16 == 0 && out%4 == 0
	switch t {
	case quant.F32:
		// llama.cpp's F32 kernels (vec_dot_f32 for one row, tinyBLAS for
		// several) bring stories260K's decode steps from ~1e-3 to ~2e-4
		// nats of llama.cpp; a batch and a token-by-token evaluation then
		// differ like llama.cpp's own do (~1e-3 in a logit).
		if sgemmOK {
			return "DotF32AVX512", "DotF32TinyBLAS"
		}
		return "DotF32AVX512", "DotF32AVX512"
	case quant.F16:
		if sgemmOK {
			return "DotF16AVX512", "DotF16TinyBLAS"
		}
		return "DotF16AVX512", "DotF16AVX512"
	case quant.Q8_0:
		// vec_dot_q8_0_q8_0 (one row) and tinyBLAS_Q0_AVX (several)
		// accumulate alike.
		return "DotQ8_0AVX2", "DotQ8_0AVX2"
	case quant.Q4_0:
		// A multiple of 8 rows goes to the repack buffer (repack.cpp
		// ggml_repack_get_optimal_repack_type: q4_0_8x8_q8_0 with AVX2),
		// the rest runs vec_dot_q4_0_q8_0 / tinyBLAS_Q0_AVX.
		if out%8 == 0 {
			return "DotQ4_0Repack8x8", "DotQ4_0Repack8x8"
		}
		return "DotQ4_0AVX2", "DotQ4_0AVX2"
	case quant.Q4_K:
		// Likewise a multiple of 8 rows is repacked (q4_K_8x8_q8_K with
		// AVX2) and multiplied by ggml_gemv/gemm_q4_K_8x8_q8_K.
		if out%8 == 0 && cpugen.Funcs["DotQ4_KRepack8x8"] != nil {
			return "DotQ4_KRepack8x8", "DotQ4_KRepack8x8"
		}
	}
	if x86, ok := x86KOrders[t]; ok && cpugen.Funcs[x86] != nil {
		// ggml's AVX2 vec_dot for every row count (tinyBLAS has no k-quants).
		return x86, x86
	}
	if name := "Dot" + t.String(); cpugen.Funcs[name] != nil {
		return name, name
	}
	return "", ""
}

// x86KOrders are the k-quant dots in ggml's AVX2 order (vec_dot_*_q8_K;
// tinyBLAS has no k-quants, so every row count runs them). Q4_K with a
// multiple of 8 rows takes the repack order above instead.
var x86KOrders = map[quant.Type]string{
	quant.Q5_K: "DotQ5_KAVX2",
	quant.Q6_K: "DotQ6_KAVX2",
}

// kern is the kernel that computes one order: a native one from
// kernels/cpukern when the CPU has it, else the generated Go.
type kern struct {
	order  string // the kernels/cpugen function whose results it gives; "VecDot<type>" for quant.VecDot
	isa    string // "go", or the native kernel's instruction set
	dot    func(n int, w, x []byte) float32
	tile   cpukern.Tile
	tw, tx int                 // the tile's weight rows and activation rows (1, 1 without one)
	rows   cpukern.Rows        // optional: a block of weight rows with one activation row in one call
	small  []cpukern.SmallTile // optional: 1×X tiles for fewer rows than tx, largest first
}

func pickKern(t quant.Type, order string) kern {
	if order == "" {
		return kern{order: "VecDot" + t.String(), isa: "go", tw: 1, tx: 1,
			dot: func(n int, w, x []byte) float32 { return quant.VecDot(t, n, w, x) }}
	}
	k := kern{order: order, isa: "go", tw: 1, tx: 1}
	k.dot, _ = cpugen.Funcs[order].(func(int, []byte, []byte) float32)
	if nk, ok := cpukern.Lookup(order); ok && nk.Dot != nil && nk.Type == t {
		k.dot, k.isa = nk.Dot, nk.ISA
		if nk.Tile != nil && nk.TileW > 0 && nk.TileX > 0 {
			k.tile, k.tw, k.tx = nk.Tile, nk.TileW, nk.TileX
		}
		k.rows = nk.Rows
		k.small = nk.Small
	}
	return k
}

// quantizer is the activation quantizer to partner type t: a native one
// when registered, else quant's (llama.cpp on x86 quantizes activations
// with its AVX2 rounding, 127/amax and ties to even; matching it keeps
// greedy output equal).
func quantizer(t quant.Type) (func(x []float32, dst []byte), string) {
	if q, ok := cpukern.LookupQuantizer(t); ok && q.Quantize != nil {
		return q.Quantize, q.ISA
	}
	return func(x []float32, dst []byte) { quant.QuantizeRowX86(t, x, dst) }, "go"
}

// KernelUse is which kernel a matmul of a runner has run (or would run).
type KernelUse struct {
	Weight string `json:"weight"` // GGUF tensor name
	Type   string `json:"type"`   // weight type
	Rows   string `json:"rows"`   // "1" (decode) or "batch"
	Order  string `json:"order"`  // the dot-product order (a kernels/cpugen function)
	ISA    string `json:"isa"`    // "go" or the native kernel's instruction set
	Tile   [2]int `json:"tile"`   // weight rows × activation rows per kernel call
	Ran    bool   `json:"ran"`    // it ran at least once

	// Tensors counts the weights that share the kernel, where a list
	// gathers them (doctor's); 0 in a runner's per-weight list.
	Tensors int `json:"tensors,omitempty"`
}

// Kernels lists, for every matmul of the graph, the kernel of each row
// class and whether it has run: which kernel (order and ISA) ran.
func (r *Runner) Kernels() []KernelUse {
	var out []KernelUse
	for _, m := range r.matmuls {
		one, many := m.one.use(m.w.Type, "1"), m.many.use(m.w.Type, "batch")
		one.Weight, many.Weight = m.w.GGUF, m.w.GGUF
		one.Ran, many.Ran = m.ran[0], m.ran[1]
		out = append(out, one, many)
	}
	return out
}

// MatMulKernels is what a matmul over weights of type t (in inputs, out
// outputs) runs on this CPU for one activation row and for several, as a
// runner would plan it (doctor lists these).
func MatMulKernels(t quant.Type, in, out int) (one, many KernelUse) {
	o, m := MatMulOrders(t, in, out)
	return pickKern(t, o).use(t, "1"), pickKern(t, m).use(t, "batch")
}

func (k kern) use(t quant.Type, rows string) KernelUse {
	return KernelUse{Type: t.String(), Rows: rows, Order: k.order, ISA: k.isa, Tile: [2]int{k.tw, k.tx}}
}

// matmul is one planned y = W·x.
type matmul struct {
	r      *Runner
	w      *Bound
	src    int // input node
	x, y   []float32
	in     int // inputs (weight row length)
	out    int // outputs (weight rows)
	qrb    int // bytes of a quantized activation row
	wrb    int // bytes of a weight row
	vdt    quant.Type
	quant  func(x []float32, dst []byte)
	one    kern // for one activation row
	many   kern // for several
	isOut  bool // the logits node: y holds only the computed rows
	onlyOu bool // llama.cpp computes the output rows only

	// The current call.
	k        *kern
	lo, hi   int // activation rows computed
	ylo      int // the row of y that row lo goes to, minus lo
	jlo, jhi int // weight rows computed
	p        tune.Params
	nxb      int // activation blocks
	taskFn   func(t int)
	quantFn  func(lo, hi int)

	tuned    [34]tuneState // by row class: 0 decode, c = bits.Len(rows-1) for batches
	ran      [2]bool
	measured int // calls spent measuring candidates
}

// tuneState is the parameters of one row class, or their measurement.
type tuneState struct {
	p      tune.Params
	ready  bool
	shape  tune.Shape
	cands  []tune.Params
	cost   []float64 // ns per weight row, the least over the rounds measured
	count  []int
	rounds int
}

// lowerMatMul computes y = W·x the way ggml's CPU backend does: each input
// row is quantized once to the weight type's dot-product partner type, then
// every output element is one dot product of a weight row with it, in the
// order MatMulOrders names. The work is split into tasks of (weight-row
// block × activation-row block), claimed by the pool's workers, so a block
// of weights is read once per activation block while it is in cache; the
// sizes come from runtime/tune. Every output element is the same dot
// product whatever the split, so tuning never changes results.
func (r *Runner) lowerMatMul(id int, n *dsl.Node) (func(), error) {
	w := &r.m.Weights[n.Weight]
	m := &matmul{r: r, w: w, src: n.In[0], x: r.bufs[n.In[0]], y: r.bufs[id], in: int(w.Dims[0]), out: n.Cols,
		qrb: r.qRowBytes(n), wrb: w.RowBytes(), vdt: quant.VecDotType(w.Type), isOut: id == r.outID}
	m.onlyOu = r.outputRowsOnly(id) && !r.opt.LogitsAll
	oneOrder, manyOrder := MatMulOrders(w.Type, m.in, m.out)
	m.one, m.many = pickKern(w.Type, oneOrder), pickKern(w.Type, manyOrder)
	m.quant, _ = quantizer(m.vdt)
	m.taskFn, m.quantFn = m.task, m.quantize
	r.matmuls = append(r.matmuls, m)
	return m.run, nil
}

func (m *matmul) run() {
	r := m.r
	m.lo, m.hi = 0, r.nRows
	if m.isOut || m.onlyOu && !r.allRows {
		// Only the logit rows reach the output: the others are not computed.
		m.lo = r.outRow
	}
	m.ylo = 0
	if m.isOut {
		m.ylo = m.lo
	}
	rows := m.hi - m.lo
	if rows <= 0 {
		return
	}
	class := 0
	m.k = &m.one
	if rows >= 2 {
		class = bits.Len(uint(rows - 1))
		m.k = &m.many
	}
	m.ran[min(class, 1)] = true
	// The activation rows, quantized once for every matmul that reads
	// the same node's rows in this step (q, k and v; gate and up).
	if r.qSrc != m.src || r.qType != m.vdt || r.qLo != m.lo || r.qHi != m.hi {
		if rows >= 4 && r.pool.Threads() > 1 {
			r.pool.Run(rows, 2, m.quantFn)
		} else {
			m.quantize(0, rows)
		}
		r.qSrc, r.qType, r.qLo, r.qHi = m.src, m.vdt, m.lo, m.hi
	}
	ts := &m.tuned[class]
	if !ts.ready && ts.cands == nil {
		m.startTune(ts, class, rows)
	}
	if ts.ready {
		m.exec(ts.p, 0, m.out)
		return
	}
	m.measure(ts)
}

func (m *matmul) quantize(a, b int) {
	q := m.r.qbuf
	for i := a; i < b; i++ {
		row := m.lo + i
		m.quant(m.x[row*m.in:(row+1)*m.in], q[i*m.qrb:(i+1)*m.qrb])
	}
}

// exec computes weight rows [jlo, jhi) for the call's activation rows with p.
func (m *matmul) exec(p tune.Params, jlo, jhi int) {
	m.p, m.jlo, m.jhi = p, jlo, jhi
	rows := m.hi - m.lo
	m.nxb = (rows + p.XRows - 1) / p.XRows
	nwb := (jhi - jlo + p.Rows - 1) / p.Rows
	m.r.pool.Tasks(nwb*m.nxb, p.Workers, m.taskFn)
}

// task t is weight block t/nxb with activation block t%nxb: consecutive
// tasks share a weight block, which stays in cache while the activation
// blocks pass it.
func (m *matmul) task(t int) {
	wb, xb := t/m.nxb, t%m.nxb
	j0 := m.jlo + wb*m.p.Rows
	j1 := min(j0+m.p.Rows, m.jhi)
	i0 := m.lo + xb*m.p.XRows
	i1 := min(i0+m.p.XRows, m.hi)
	m.block(j0, j1, i0, i1)
}

// block computes outputs [j0, j1) of activation rows [i0, i1): native
// tiles where they fit, row dots for the rest (each element the same).
func (m *matmul) block(j0, j1, i0, i1 int) {
	k := m.k
	in, out, wrb, qrb, lo, ylo := m.in, m.out, m.wrb, m.qrb, m.lo, m.ylo
	wd, q, y := m.w.Data, m.r.qbuf, m.y
	if k.rows != nil && (k.tile == nil || i1-i0 < k.tx) {
		// Decode (or too few rows for the tile): a few concurrent streams
		// share each weight row's read through the small tiles; the rest
		// get the whole weight block against each activation row, one
		// call apiece.
		pf := m.p.Prefetch
		if pf == 0 { // untuned (batches, older caches): the kernels' default
			pf = cpukern.DefaultPrefetch
		}
		for i := m.small(j0, j1, i0, i1); i < i1; i++ {
			yr := (i - ylo) * out
			k.rows(in, wd[j0*wrb:j1*wrb], wrb, q[(i-lo)*qrb:(i-lo+1)*qrb], y[yr+j0:yr+j1], pf)
		}
		return
	}
	j := j0
	if k.tile != nil && i1-i0 >= k.tx {
		for ; j+k.tw <= j1; j += k.tw {
			i := i0
			for ; i+k.tx <= i1; i += k.tx {
				k.tile(in, wd[j*wrb:], wrb, q[(i-lo)*qrb:], qrb, y[(i-ylo)*out+j:], out)
			}
			// the rows left after the tiles: 1×X small tiles on each weight row
			i = m.small(j, j+k.tw, i, i1)
			for ; i < i1; i++ {
				qr := q[(i-lo)*qrb : (i-lo+1)*qrb]
				for jj := j; jj < j+k.tw; jj++ {
					y[(i-ylo)*out+jj] = k.dot(in, wd[jj*wrb:(jj+1)*wrb], qr)
				}
			}
		}
	}
	for ; j < j1; j++ {
		wr := wd[j*wrb : (j+1)*wrb]
		for i := i0; i < i1; i++ {
			y[(i-ylo)*out+j] = k.dot(in, wr, q[(i-lo)*qrb:(i-lo+1)*qrb])
		}
	}
}

// small computes weight rows [j0, j1) of activation rows from i0 with the
// small tiles, largest first, and returns the first row it left (i1 at most).
func (m *matmul) small(j0, j1, i0, i1 int) int {
	in, out, wrb, qrb, lo, ylo := m.in, m.out, m.wrb, m.qrb, m.lo, m.ylo
	wd, q, y := m.w.Data, m.r.qbuf, m.y
	i := i0
	for _, s := range m.k.small {
		for ; i+s.X <= i1; i += s.X {
			for j := j0; j < j1; j++ {
				s.Tile(in, wd[j*wrb:], wrb, q[(i-lo)*qrb:], qrb, y[(i-ylo)*out+j:], out)
			}
		}
	}
	return i
}

// defaults are the untuned parameters: blocks of weights and activations
// sized for a core's L2, a few tasks per worker so a slowed worker is
// balanced, and one worker where the whole product is too small to be
// worth waking another.
func (m *matmul) space(rows int) tune.Space {
	k := m.k
	workers := m.r.pool.Threads()
	s := tune.Space{RowAlign: k.tw, XAlign: k.tx, MaxRows: m.out, MaxXRows: rows, MaxWorkers: workers}
	d := &s.Def
	d.Workers = workers
	if m.in*m.out*rows < 1<<16 {
		d.Workers = 1
	}
	if rows == 1 {
		// Decode streams each weight once: blocks of 128 KiB (one Rows
		// call each) beat 32 KiB by ~5% in tg on the 2-core host, and
		// at least four per worker keep the split balanced.
		d.Rows = min(max(128<<10/m.wrb, 1), (m.out+4*workers-1)/(4*workers))
		d.XRows = 1
		if k.rows != nil {
			// the rows kernels' prefetch distance, measured with the rest
			d.Prefetch = cpukern.DefaultPrefetch
			s.Prefetches = []int{512, 1024, 4096, 8192}
		}
		return s
	}
	d.Rows = max(64<<10/m.wrb, 1)
	d.XRows = max(512<<10/m.qrb, 1)
	if nwb := (m.out + d.Rows - 1) / d.Rows; nwb < 4*workers {
		// Few weight blocks: more, smaller ones, so every worker has some.
		d.Rows = max((m.out+4*workers-1)/(4*workers), 1)
	}
	return s
}

func (m *matmul) startTune(ts *tuneState, class, rows int) {
	s := m.space(rows)
	mode := m.r.opt.Tune
	if mode == tune.Off {
		ts.p, ts.ready = s.Candidates(tune.Off)[0], true
		return
	}
	batch := 1
	if class > 0 {
		batch = 1 << class
	}
	ts.shape = tune.Shape{Op: "matmul", Type: m.w.Type.String(), Order: m.k.order, ISA: m.k.isa, In: m.in, Out: m.out, Batch: batch}
	if p, ok := m.r.tuneCache().Get(ts.shape); ok {
		ts.p, ts.ready = clampTo(s, p), true
		return
	}
	ts.cands = s.Candidates(mode)
	ts.cost = make([]float64, len(ts.cands))
	ts.count = make([]int, len(ts.cands))
}

// clampTo fits a cached choice to this call's space (a cache written for
// more workers than this runner has).
func clampTo(s tune.Space, p tune.Params) tune.Params {
	s.Def = p
	return s.Candidates(tune.Off)[0]
}

// measure computes this call's product with every candidate on its own
// segment of the weight rows (together they cover all of them once), timing
// each, the segments rotating between rounds; after the mode's rounds the
// cheapest per weight row is the choice.
func (m *matmul) measure(ts *tuneState) {
	m.measured++
	nc := len(ts.cands)
	align := max(m.k.tw, 1)
	seg := (m.out + nc - 1) / nc
	seg = (seg + align - 1) / align * align
	for c := 0; c < nc; c++ {
		lo := c * seg
		hi := min(lo+seg, m.out)
		if lo >= hi {
			continue
		}
		cand := (c + ts.rounds) % nc
		start := time.Now()
		m.exec(ts.cands[cand], lo, hi)
		// The least cost seen: another process taking the CPU only adds.
		c := float64(time.Since(start).Nanoseconds()) / float64(hi-lo)
		if ts.count[cand] == 0 || c < ts.cost[cand] {
			ts.cost[cand] = c
		}
		ts.count[cand]++
	}
	ts.rounds++
	if ts.rounds < m.r.opt.Tune.Rounds() {
		return
	}
	best := -1
	for c := range ts.cands {
		if ts.count[c] == 0 {
			if ts.rounds < nc+m.r.opt.Tune.Rounds() {
				return // not every candidate has had a segment yet
			}
			continue
		}
		if best < 0 || ts.cost[c] < ts.cost[best] {
			best = c
		}
	}
	ts.p, ts.ready = ts.cands[best], true
	ts.cands, ts.cost, ts.count = nil, nil, nil
	m.r.tuneCache().Put(ts.shape, ts.p)
}
