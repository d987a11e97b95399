// Package gpuexec runs a model's graph on one CUDA GPU. Every kernel is a
// dsl/kernel kernel of kernels/ops rendered to PTX at run time for the
// device found (no hand-written CUDA); weights are uploaded once in their
// stored quant layout; buffers are planned once; a decode step is one
// token, its launches captured into a CUDA graph replayed for every
// position, and a prompt runs in prefill steps of many rows (the tokens and
// position live in a small device buffer). See docs/gpu.md.
package gpuexec

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/exec"
)

// alloc is one device allocation of n elements of kind: an activation slot,
// a weight (init holds its bytes), a KV cache or the step buffer.
type alloc struct {
	name string
	kind kernel.Kind
	n    int
	init []byte // uploaded once; nil: zeroed
	// parts are uploaded once one after another where init is nil (the
	// matrices of a stack, never copied into one slice)
	parts [][]byte
	// repack, where set, rewrites the init bytes into the device layout
	// as they are uploaded (deviceLayout: Q6_KA), a chunk of whole units
	// at a time
	repack *repack
	// resident marks a resident f16 copy of a weight: written once by the
	// setup launches, read-only after (constant, like init's)
	resident bool
	// cache marks a layer's k or v cache (the launches that read one are
	// an attention's)
	cache bool
}

// repack is a rewrite of a weight's bytes into its device layout that
// works on whole units of unit bytes.
type repack struct {
	fn   func(dst, src []byte) error
	unit int
}

// repackChunk bounds the transient copy a repacked upload makes: a chunk
// of whole units of about this many bytes at a time, not the whole matrix
// (the 8B's Q6_K head is 431 MB).
const repackChunk = 8 << 20

// initBytes calls f with each run of bytes a's upload starts with and its
// offset.
func (a alloc) initBytes(f func(off int, b []byte) error) error {
	put := f
	if rp := a.repack; rp != nil {
		var r []byte
		put = func(off int, b []byte) error {
			if len(b)%rp.unit != 0 {
				return fmt.Errorf("%s: %d bytes are not whole units of %d", a.name, len(b), rp.unit)
			}
			step := max(1, repackChunk/rp.unit) * rp.unit
			for c := 0; c < len(b); c += step {
				src := b[c:min(c+step, len(b))]
				if cap(r) < len(src) {
					r = make([]byte, len(src))
				}
				if err := rp.fn(r[:len(src)], src); err != nil {
					return fmt.Errorf("%s: %w", a.name, err)
				}
				if err := f(off+c, r[:len(src)]); err != nil {
					return err
				}
			}
			return nil
		}
	}
	if a.init != nil {
		return put(0, a.init)
	}
	off := 0
	for _, b := range a.parts {
		if err := put(off, b); err != nil {
			return err
		}
		off += len(b)
	}
	return nil
}

// view is elements [off, off+n) of allocation a.
type view struct{ a, off, n int }

// launch is one kernel call: per parameter a view (buffers) or an int or
// float32 (scalars), in k.Params order.
type launch struct {
	k    *kernel.Kernel
	args []any
	node int
	side bool // on the runner's second stream, joined at the step's end (warm.go)
}

// plan is a graph lowered, independent of any device, twice over the same
// weights and KV caches: for a one-row step (decode) and, where rows > 1,
// for a prefill step of rows rows (the last chunk of a prompt padded; only
// the last real row's logits are computed).
type plan struct {
	allocs   []alloc
	launches []launch // a one-row step
	// longs are the one-row step from further positions on (splitTier:
	// its attention split over CTAs), by position; none: launches at every
	// position
	longs   []longStep
	prefill []launch     // a rows-row step
	verify  []verifyStep // steps returning every row's logits, by rows (none: no verify steps)
	setup   []launch     // run once after the uploads (the resident f16 weights' decode)
	dst     *[]launch

	// matVecs are the integer mat-vecs' forms, layouts and shapes, by
	// kernel: what a rewrite of their launches builds on (ropestack.go,
	// the quantizers and norms folded into the launch before)
	matVecs map[*kernel.Kernel]layoutShape

	step    int  // the I32 allocation [last real row, position, tokens…]
	logits  view // the last node's output, one-row step
	plogits view // the logits of the last real row, prefill step
	vocab   int
	context int
	rows    int // prefill rows (1: no prefill plan)
	kvRows  int // cache rows: context plus the padding of a last chunk and of AttentionBlock's last block
	embRows int // rows of the embedding matrix (the token ids accepted)

	tiles         bool  // prefill products on the tensor cores (MatMulBlock: sm_80 and later)
	f16Left       int64 // bytes left for resident f16 copies of prefill weights (f16Budget)
	hidden        bool  // a stage graph ending in hidden rows (stage.go), not logits
	input, pinput view  // a stage's rows node, one-row and prefill steps (n 0: it takes tokens)

	// tuned holds measured shapes of decode mat-vecs and prefill products
	// (tune.go); dots and products list the plan's, each once
	tuned    tunings
	dots     []dotKey
	products []blockKey
}

// tunings are shapes measured on a device (tune.go): of decode mat-vecs
// and of prefill products on the tensor cores, by their keys.
type tunings struct {
	dots   map[dotKey]ops.DotShape
	blocks map[blockKey]kernel.BlockShape
}

// blockKey is one prefill product on the tensor cores (MatMulBlock, f16
// operands): activation rows, weight rows n and columns k.
type blockKey struct{ rows, n, k int }

// blockShape is the CTA block of product b: its tuned one, else the
// rule's (prefillBlock), and records b among the plan's products.
func (p *plan) blockShape(b blockKey) kernel.BlockShape {
	if !slices.Contains(p.products, b) {
		p.products = append(p.products, b)
	}
	if sh, ok := p.tuned.blocks[b]; ok && slices.Contains(prefillBlocks, sh) {
		return sh
	}
	return prefillBlock(b.rows, b.n)
}

// dotKey is one integer decode mat-vec: store form, weight type, output
// rows (a stack's all) and columns.
type dotKey struct {
	form       string
	t          quant.Type
	rows, cols int
}

// dotShape is the shape of mat-vec d: its tuned one, else the rule's
// (dotShape), and records d among the plan's mat-vecs.
func (p *plan) dotShape(d dotKey) ops.DotShape {
	if !slices.Contains(p.dots, d) {
		p.dots = append(p.dots, d)
	}
	sh := dotShape(d.form, d.t, d.rows)
	if tuned, ok := p.tuned.dots[d]; ok && d.rows%tuned.Rows == 0 {
		tuned.Prefetch = sh.Prefetch // its gain is the overlap with the kernel before, which a lone launch cannot time
		sh = tuned
	}
	if u := phasedUnroll(); u > 0 { // a one-row step's mat-vecs only (the phased ones)
		sh.Unroll = u
	}
	if r, t, ok := wideQ4K(); ok && d.t == quant.Q4_K && d.cols >= 8192 && d.form != "SwiGLU" && d.rows%r == 0 {
		sh.Rows, sh.Threads = r, t
	}
	return stageShape(sh, d)
}

// wideQ4K is JITLLM_Q4K_WIDE="rows,threads": the shape of the Q4_K
// mat-vecs of 8192 columns or more (the 8B's down projection, which the
// rule's shape leaves unstaged: four warps' slots of two 8 KB rows are
// more than a launch's stage room), an experiment.
func wideQ4K() (rows, threads int, ok bool) {
	r, t, found := strings.Cut(os.Getenv("JITLLM_Q4K_WIDE"), ",")
	if !found {
		return 0, 0, false
	}
	rows, err1 := strconv.Atoi(r)
	threads, err2 := strconv.Atoi(t)
	if err1 != nil || err2 != nil || rows < 1 || threads < 32 || threads%32 != 0 || threads > 1024 {
		return 0, 0, false
	}
	return rows, threads, true
}

// The step buffer's views: [last row, position] and the tokens.
var (
	stepAll  = func(p *plan) view { return view{p.step, 0, 2} }
	stepToks = func(p *plan, rows int) view { return view{p.step, 2, rows} }
)

// verifyRows are the rows of the verify steps (plan.verify): up to the
// token chosen and the 8 that speculative decoding drafts by default
// (-draft-max). A step computes all its rows (its integer mat-vecs are
// bound by their arithmetic, not the weights' bytes: on an H100 the 8B's
// 9-row step took 9.4 ms with 2 real rows, the one-row step 2.6), so
// fewer tokens take a smaller step.
var verifyRows = []int{2, 4, 1 + 8}

// verifyStep is a step of rows rows that returns every row's logits.
type verifyStep struct {
	rows     int
	launches []launch
	logits   view
}

// vrows is the largest verify step's rows (0: none).
func (p *plan) vrows() int {
	if len(p.verify) == 0 {
		return 0
	}
	return p.verify[len(p.verify)-1].rows
}

// verifyFor is the index of the smallest verify step that holds n rows,
// or -1.
func (p *plan) verifyFor(n int) int {
	return slices.IndexFunc(p.verify, func(v verifyStep) bool { return v.rows >= n })
}

// PrefillRows is the rows of a prefill step for a context: prompts run in
// chunks of that many. 512 rows give MatMulTile twice the warps of 256 and
// halve the f16 decodes of the weights a token (H200, 1B Q4_K_M pp512:
// 11745 against 8881 tok/s).
func prefillRows(context int) int { return max(1, min(512, context)) }

func (p *plan) add(a alloc) int { p.allocs = append(p.allocs, a); return len(p.allocs) - 1 }

func (p *plan) call(node int, k *kernel.Kernel, args ...any) {
	*p.dst = append(*p.dst, launch{k: k, args: args, node: node})
}

func whole(a int, p *plan) view { return view{a, 0, p.allocs[a].n} }

// blocks maps a quant type to its BlockDecode.
func blockOf(t quant.Type) (ops.BlockDecode, bool) {
	for _, d := range ops.Blocks() {
		if d.Name == t.String() {
			return d, true
		}
	}
	return ops.BlockDecode{}, false
}

// Device layouts. A weight is uploaded in its stored bytes but for Q6_K
// matrices whose rows hold whole groups of ops.Q6_KAGroup blocks (the
// 8B's and 1B's: 2048, 4096, 14336 columns), which go up as ops.Q6_KA,
// regrouped so that every block body is 16-byte aligned and the
// mat-vecs read it with 16-byte loads. Every kernel that reads such a
// weight takes the layout's BlockDecode or integer cut. JITLLM_Q6KA=0
// keeps Q6_K's own layout (for comparisons).

// deviceLayout names the layout a weight of type t and cols columns has
// on the device: a BlockDecode's and integer cut's name.
func deviceLayout(t quant.Type, cols int) string {
	if t == quant.Q6_K && cols%ops.Q6_KA.QK == 0 && os.Getenv("JITLLM_Q6KA") != "0" {
		return ops.Q6_KA.Name
	}
	return t.String()
}

// weightCols is w's row length (its columns; a vector's length).
func weightCols(w *exec.Bound) int {
	if len(w.Dims) == 0 {
		return 0
	}
	return int(w.Dims[0])
}

// layoutBlock is the BlockDecode of w's device layout.
func layoutBlock(w *exec.Bound) (ops.BlockDecode, bool) {
	if deviceLayout(w.Type, weightCols(w)) == ops.Q6_KA.Name {
		return ops.Q6_KA, true
	}
	return blockOf(w.Type)
}

// repackFor is the upload's rewrite of w's bytes into its device layout,
// nil where the layout is the stored one.
func repackFor(w *exec.Bound) *repack {
	if deviceLayout(w.Type, weightCols(w)) == ops.Q6_KA.Name {
		return &repack{ops.RepackQ6_KA, ops.Q6_KA.Bytes}
	}
	return nil
}

// dotQuantizer is the device quantizer of an integer decode mat-vec over
// weights of type t (their dot partner type): its kernel's name and
// constructor and its block size.
func dotQuantizer(t quant.Type) (name string, mk func() *kernel.Kernel, qk int) {
	if quant.VecDotType(t) == quant.Q8_0 {
		return "QuantizeQ8_0", ops.QuantizeQ8_0, 32
	}
	return "QuantizeQ8_K", ops.QuantizeQ8_K, 256
}

// swigluQ8_0 reports whether a one-row step's SwiGLU quantizes its own
// output to Q8_0 for the down projection after it (ops.DotSwiGLUQ8_0,
// JITLLM_SWIGLU_Q8_0=1: in the SwiGLU's shape, a CTA of 32 rows; =2 or
// =4: that many rows a group, a smaller CTA): off, 0.90 of the default on
// the H100 (its CTAs of 32 rows, one a multiprocessor: docs/perf, stop 38).
func swigluQ8_0() bool {
	switch os.Getenv("JITLLM_SWIGLU_Q8_0") {
	case "1", "2", "4", "count":
		return true
	}
	return false
}

// swigluQ8_0Counted is JITLLM_SWIGLU_Q8_0=count: the SwiGLU in its own
// shape and grid, each block of 32 outputs quantized by the warp that
// completes it (ops.DotThenBlockCounted; untimed).
func swigluQ8_0Counted() bool { return os.Getenv("JITLLM_SWIGLU_Q8_0") == "count" }

// normFold reports whether a one-row step's RMSNorm is begun by the
// residual Add's mat-vec before it (ops.DotAddNormQ8_0) where every reader
// takes a Q8_0 activation, the readers scaling their sums by the norm
// (JITLLM_NORM_FOLD=1): off, 0.97 of the default on the H100 (the folded
// mat-vec's CTAs of 32 rows: docs/perf, stop 38).
func normFold() bool { return os.Getenv("JITLLM_NORM_FOLD") == "1" || normFoldCounted() }

// normFoldCounted is JITLLM_NORM_FOLD=count: the residual's mat-vec in its
// own shape and grid, each block of 32 outputs begun by the warp that
// completes it (ops.DotThenBlockCounted; untimed).
func normFoldCounted() bool { return os.Getenv("JITLLM_NORM_FOLD") == "count" }

// swigluQ8_0Shape is the folded SwiGLU's shape from the plan's, its rows
// JITLLM_SWIGLU_Q8_0's where 2 or 4.
func swigluQ8_0Shape(sh ops.DotShape) ops.DotShape {
	if r, err := strconv.Atoi(os.Getenv("JITLLM_SWIGLU_Q8_0")); err == nil && r > 1 {
		sh.Rows = r
	}
	return sh
}

// integerDot reports whether a decode mat-vec over weights of type t runs
// in integers: an ops.DotMatVecs kernel for t whose blocks are its
// quantizer's.
func integerDot(t quant.Type) bool {
	d, ok := blockOf(t)
	if !ok {
		return false
	}
	_, dot := ops.DotMatVecs()[d.Name]
	_, _, qk := dotQuantizer(t)
	return dot && qk == d.QK
}

// newPlan lowers m's graph for one row per step and, for rows > 1, for
// prefill steps of rows rows, with a KV cache of context positions, for a
// device with tensor cores.
func newPlan(m *exec.Model, context, rows int) (*plan, error) {
	return newPlanTiles(m, context, rows, true, 0)
}

// newPlanTiles is newPlan for a device with (tiles) or without tensor
// cores, keeping f16 copies of prefill weights resident in up to f16Budget
// bytes: a prefill product then reads its matrix's copy, decoded once when
// the runner binds, instead of decoding it into a shared scratch every step
// (DequantF16 was 11% of a 512-row step of the 1B on the H200).
func newPlanTiles(m *exec.Model, context, rows int, tiles bool, f16Budget int64) (*plan, error) {
	return newPlanTuned(m, context, rows, tiles, f16Budget, tunings{})
}

// newPlanTuned is newPlanTiles with the decode mat-vecs and prefill
// products of tuned in their measured shapes (tune.go).
func newPlanTuned(m *exec.Model, context, rows int, tiles bool, f16Budget int64, tuned tunings) (*plan, error) {
	g := m.Graph
	rows = max(rows, 1)
	p := &plan{context: context, vocab: m.VocabSize(), rows: rows, kvRows: context + rows - 1 + kernel.AttnBlock - 1, tiles: tiles, f16Left: f16Budget, tuned: tuned}
	resident16 := map[int]int{} // weight index -> its resident f16 copy
	p.step = p.add(alloc{name: "step", kind: kernel.I32, n: 2 + rows})
	id, ok := g.Outputs["logits"]
	if !ok {
		if id, ok = g.Outputs[dsl.StageOutput]; !ok {
			return nil, fmt.Errorf("the graph has no logits output")
		}
		p.hidden, p.vocab = true, g.Nodes[id].Cols // one row's download
	}

	weights := map[int]view{} // weight index -> its stored bytes on the device
	weight := func(wi int) view {
		if v, ok := weights[wi]; ok {
			return v
		}
		w := &m.Weights[wi]
		a := p.add(alloc{name: w.GGUF, kind: kernel.U8, n: len(w.Data), init: w.Data, repack: repackFor(w)})
		weights[wi] = view{a, 0, len(w.Data)}
		return weights[wi]
	}
	// the matrices of stacked mat-vecs uploaded one after another, each a
	// view of the one allocation, so that one launch reads them as one
	stacks := stackedMatVecs(g, m)
	stackOf := map[int][]int{} // node -> its stack
	for _, st := range stacks {
		var parts [][]byte
		var names []string
		n := 0
		for _, j := range st {
			stackOf[j] = st
			w := &m.Weights[g.Nodes[j].Weight]
			parts = append(parts, w.Data)
			names = append(names, w.GGUF)
			n += len(w.Data)
		}
		// a stack's matrices share their type and columns, so their layout
		a := p.add(alloc{name: strings.Join(names, " + "), kind: kernel.U8, n: n, parts: parts, repack: repackFor(&m.Weights[g.Nodes[st[0]].Weight])})
		off := 0
		for _, j := range st {
			wi := g.Nodes[j].Weight
			weights[wi] = view{a, off, len(m.Weights[wi].Data)}
			off += len(m.Weights[wi].Data)
		}
	}
	vectors := map[int]int{}
	vector := func(wi int) (int, error) {
		if a, ok := vectors[wi]; ok {
			return a, nil
		}
		w := &m.Weights[wi]
		v := make([]float32, w.Dims[0])
		if err := quant.Dequantize(w.Type, w.Data, v); err != nil {
			return 0, fmt.Errorf("weight %s: %w", w.GGUF, err)
		}
		vectors[wi] = p.add(alloc{name: w.GGUF + " (f32)", kind: kernel.F32, n: len(v), init: f32Bytes(v)})
		return vectors[wi], nil
	}
	freqAllocs := map[int]int{}
	var splits []splitTier // the long steps (decodeSplits)
	// a one-row step's attention takes a CTA a key-value group (AttentionBlockHeads);
	// JITLLM_ATTN_HEADS=0 a CTA a head (for comparisons on a device)
	attnHeads := os.Getenv("JITLLM_ATTN_HEADS") != "0"
	var alts []map[int][]launch // a long step's one-row launches' indices it replaces, and by what
	scratch := -1               // activations rounded to a matmul's partner type
	scratch16 := -1             // the same rounded on to f16 for the tensor cores
	scores := -1                // attention scores
	normParts := -1             // a folded norm's parts of Σx² (ops.NormPartQ8_0)
	counts := -1                // the counted folds' block counts (ops.DotThenBlockCounted)
	parts := -1                 // split attention's pieces
	wf16 := -1                  // a prefill product's weights decoded to f16
	// the decode activation's quants and scales (MatVecDot*), in two
	// sets: a launch that quantizes its own output for the next (a
	// CTA-local phase) writes the set its mat-vec does not read, as other
	// CTAs may still be reading it
	q8, q8d := [2]int{-1, -1}, [2]int{-1, -1}
	kvs := map[int][2]int{}
	kernels := map[string]*kernel.Kernel{}
	cached := func(name string, mk func() *kernel.Kernel) *kernel.Kernel {
		if k, ok := kernels[name]; ok {
			return k
		}
		k := mk()
		kernels[name] = k
		return k
	}

	// actQuantsIn are the views of an n-value activation's quants and
	// scales in blocks of qk (the integer mat-vecs' input) in set set
	actQuantsIn := func(set, n, qk int) (view, view) {
		if q8[set] < 0 {
			sfx := [2]string{"", " (second set)"}[set]
			q8[set] = p.add(alloc{name: "activation quants" + sfx, kind: kernel.U8})
			q8d[set] = p.add(alloc{name: "activation scales" + sfx, kind: kernel.F32})
		}
		p.allocs[q8[set]].n = max(p.allocs[q8[set]].n, n)
		p.allocs[q8d[set]].n = max(p.allocs[q8d[set]].n, n/qk)
		return view{q8[set], 0, n}, view{q8d[set], 0, n / qk}
	}
	actQuants := func(n, qk int) (view, view) { return actQuantsIn(0, n, qk) }
	// actQuantsBeside are actQuantsIn's views in the set none of args
	// (a launch's) reads
	actQuantsBeside := func(args []any, n, qk int) (view, view) {
		set := 1
		for _, a := range args {
			if v, ok := a.(view); ok && v.a == q8[1] {
				set = 0
			}
		}
		return actQuantsIn(set, n, qk)
	}
	uses := make([][]int, len(g.Nodes)) // the nodes reading each node
	for i, n := range g.Nodes {
		for _, j := range n.In {
			uses[j] = append(uses[j], i)
		}
	}
	for _, o := range g.Outputs {
		uses[o] = append(uses[o], -1)
	}
	// quantizedBy is the partner quantizer every reader of node j quantizes
	// it with for an integer decode mat-vec (dotQuantizer's), or "" when a
	// reader wants its f32 values
	quantizedBy := func(j int) (name string, mk func() *kernel.Kernel, qk int) {
		for _, u := range uses[j] {
			if u < 0 || g.Nodes[u].Op != dsl.OpMatMul {
				return "", nil, 0
			}
			t := m.Weights[g.Nodes[u].Weight].Type
			qn, qmk, q := dotQuantizer(t)
			if !integerDot(t) || (name != "" && qn != name) {
				return "", nil, 0
			}
			name, mk, qk = qn, qmk, q
		}
		return name, mk, qk
	}
	// foldKernel is the integer mat-vec ls (a SwiGLU or a residual Add)
	// with its output's Q8_0 blocks (and for Add a norm's parts) made in
	// the same launch (ops.DotFold: in CTA-local phases, or counted); nil
	// where its shape cannot
	foldKernel := func(ls layoutShape, counted bool) *kernel.Kernel {
		k, err := ops.DotFold(ls.form, ls.layout, ls.shape, counted)
		if err != nil {
			return nil
		}
		// by the kernel's name: shapes the fold reshapes alike (a local
		// fold's rows and threads, dotThenBlock) make one kernel
		name := "fold " + k.Name
		if prev, ok := kernels[name]; ok {
			return prev
		}
		kernels[name] = k
		return k
	}
	// blockCounts is a counted fold's counts of n blocks (zero once, then
	// only growing: every launch adds the same to each)
	blockCounts := func(n int) view {
		if counts < 0 {
			counts = p.add(alloc{name: "block counts", kind: kernel.U32})
		}
		p.allocs[counts].n = max(p.allocs[counts].n, n)
		return view{counts, 0, n}
	}
	// normFoldReaders are, where every reader of node j (an RMSNorm) is an
	// integer decode mat-vec that takes a Q8_0 activation, whether each
	// takes it in a layout of its own (Q4_KQ8_0, Q6_KAQ8_0: q8Act)
	normFoldReaders := func(j int) (map[int]bool, bool) {
		q8 := map[int]bool{}
		for _, u := range uses[j] {
			if u < 0 || g.Nodes[u].Op != dsl.OpMatMul {
				return nil, false
			}
			t := m.Weights[g.Nodes[u].Weight].Type
			_, _, qk := dotQuantizer(t)
			switch l := deviceLayout(t, g.Nodes[j].Cols); {
			case !integerDot(t):
				return nil, false
			case l == "Q4_K" || l == "Q6_KA":
				q8[u] = true
			case qk != 32:
				return nil, false
			}
		}
		return q8, len(uses[j]) > 0
	}
	// q4KReaders are node j's readers where every one is a Q4_K integer
	// decode mat-vec (Q4_KQ8_0 takes their activation in Q8_0);
	// JITLLM_ATTN_Q8_0=0 leaves them Q8_K (for comparisons on a device)
	q4KReaders := func(j int) ([]int, bool) {
		if os.Getenv("JITLLM_ATTN_Q8_0") == "0" || len(uses[j]) == 0 {
			return nil, false
		}
		for _, u := range uses[j] {
			if u < 0 || g.Nodes[u].Op != dsl.OpMatMul || m.Weights[g.Nodes[u].Weight].Type != quant.Q4_K {
				return nil, false
			}
		}
		return uses[j], true
	}
	// dotMatVec is the cache name and constructor of the integer decode
	// mat-vec of store form form (ops.DotMatVec's) for a matrix of weight
	// type t, rows rows and cols columns, in the plan's shape for it; with
	// acts activation rows (a verify step) in the rule's shape over them
	actQ8_0 := false        // the mat-vec being lowered reads a Q8_0 activation (q8Act)
	q8Act := map[int]bool{} // mat-vecs whose activation a producer left in Q8_0 (Q4_KQ8_0)
	// actNorm is the norm the mat-vec being lowered scales its sums by
	// (DotShape.Norm), nil for none: its parts and ε, [ss, eps], from
	// normAct, the mat-vecs reading a norm folded into the launch before
	var actNorm []any
	normAct := map[int][]any{}
	dotMatVec := func(form string, t quant.Type, rows, cols, acts int) (string, func() *kernel.Kernel) {
		var sh ops.DotShape
		if acts > 1 {
			sh = dotShape(form, t, rows)
			sh.Prefetch, sh.Acts = false, acts // launched plainly: nothing to prefetch ahead of
		} else {
			sh = p.dotShape(dotKey{form, t, rows, cols})
		}
		l := deviceLayout(t, cols)
		if actQ8_0 {
			l += "Q8_0" // Q4_KQ8_0, Q6_KAQ8_0
		}
		sh.Norm = actNorm != nil
		return fmt.Sprintf("MatVecDot%s%s%s", form, l, sh), func() *kernel.Kernel { return p.matVec(form, l, sh) }
	}

	// ropeFreqs is the allocation of RoPE node i's frequency divisors and
	// its θ scale, base^(−2/dims)
	ropeFreqs := func(i int) (int, float32, error) {
		r := g.Nodes[i].Rope
		ts := float32(math.Pow(float64(r.Base), -2.0/float64(r.Dims)))
		if fa, ok := freqAllocs[i]; ok {
			return fa, ts, nil
		}
		if r.Mode != dsl.RopeNormal && r.Mode != dsl.RopeNeox {
			return 0, 0, fmt.Errorf("node %d: rope mode %d", i, r.Mode)
		}
		half := r.Dims / 2
		freqs := make([]float32, half)
		for j := range freqs {
			freqs[j] = 1
		}
		if r.FreqsW >= 0 {
			w := &m.Weights[r.FreqsW]
			v := make([]float32, w.Dims[0])
			if err := quant.Dequantize(w.Type, w.Data, v); err != nil {
				return 0, 0, fmt.Errorf("weight %s: %w", w.GGUF, err)
			}
			if len(v) < half {
				return 0, 0, fmt.Errorf("rope frequencies %s hold %d values, need %d", w.GGUF, len(v), half)
			}
			copy(freqs, v)
		}
		fa := p.add(alloc{name: fmt.Sprintf("rope freqs node %d", i), kind: kernel.F32, n: half, init: f32Bytes(freqs)})
		freqAllocs[i] = fa
		return fa, ts, nil
	}

	// caches are attention node n's layer's k and v caches, shared by both
	// lowerings
	caches := func(n dsl.Node) (kc, vc int) {
		if _, ok := kvs[n.Layer]; !ok {
			dim := n.Attn.KVHeads * n.Attn.HeadDim
			kc := p.add(alloc{name: fmt.Sprintf("k cache %d", n.Layer), kind: kernel.U16, n: p.kvRows * dim, cache: true})
			vc := p.add(alloc{name: fmt.Sprintf("v cache %d", n.Layer), kind: kernel.U16, n: p.kvRows * dim, cache: true})
			kvs[n.Layer] = [2]int{kc, vc}
		}
		return kvs[n.Layer][0], kvs[n.Layer][1]
	}

	// lower plans a step of rows rows into dst: a one-row step, a prefill
	// step (the last real row's logits) or, with all, a verify step (every
	// row's logits; integer mat-vecs of all its rows at once)
	lower := func(rows int, dst *[]launch, all bool) (view, error) {
		p.dst = dst
		clear(q8Act) // a lowering's own producers set them for their readers
		clear(normAct)
		// activation slots by liveness, as runtime/exec plans them, but for
		// the RoPEs done in their attention's launch (ropeKVs): their inputs
		// live until it
		ropeKV := ropeKVs(g, rows)
		ropeMV := map[int]ropeRole{}
		ropeByMV := map[int]bool{} // attentions whose RoPEs their projections do
		if rows == 1 {
			ropeMV = ropeMatVecs(g, m, ropeKV, stackOf)
			for _, r := range ropeMV {
				ropeByMV[r.attn] = true
			}
		}
		late := map[int][]int{}
		for a, f := range ropeKV {
			q, k := f.inputs(g)
			late[a] = []int{q, k}
		}
		bp := g.PlanBuffersLate(rows, late)
		slotAlloc := make([]int, len(bp.Sizes))
		for i, n := range bp.Sizes {
			slotAlloc[i] = p.add(alloc{name: fmt.Sprintf("slot%d (%d rows)", i, rows), kind: kernel.F32, n: n})
		}
		out := make([]view, len(g.Nodes))
		for i, n := range g.Nodes {
			if s := bp.Slot[i]; s >= 0 {
				out[i] = view{slotAlloc[s], 0, n.Cols * rows}
			}
		}
		if rows == 1 {
			// a stack's outputs side by side in an allocation of their own
			for _, st := range stacks {
				n := 0
				for _, j := range st {
					n += g.Nodes[j].Cols
				}
				a := p.add(alloc{name: fmt.Sprintf("stacked outputs of node %d", st[0]), kind: kernel.F32, n: n})
				off := 0
				for _, j := range st {
					out[j] = view{a, off, g.Nodes[j].Cols}
					off += g.Nodes[j].Cols
				}
			}
		}
		type rounding struct { // an activation x as the rounding kernel rk left it
			rk   *kernel.Kernel
			x    view
			q, d view // a quantizer's quants and scales of x
		}
		var last rounding       // the last one, in the scratch until another replaces it
		var normQuant *rounding // set by a fused RMSNormQuantize* for the node loop's end
		seen := map[int]bool{}  // blocks with an attention
		epilogues := matVecEpilogues(g, rows)
		if all { // a verify step's integer mat-vecs store as the one-row step's
			epilogues = matVecEpilogues(g, 1)
		}
		swiglus := swiGLUs(g, epilogues)
		fused := map[int]bool{} // nodes done by the mat-vec before them
		for i, n := range g.Nodes {
			in := func(j int) view { return out[n.In[j]] }
			switch n.Op {
			case dsl.OpTokens:
			case dsl.OpRows: // filled by StageStep
				if rows > 1 {
					p.pinput = out[i]
				} else {
					p.input = out[i]
				}
			case dsl.OpEmbed:
				w := &m.Weights[n.Weight]
				p.embRows = int(w.Dims[1])
				var k *kernel.Kernel
				switch w.Type {
				case quant.F32, quant.F16:
					f16 := w.Type == quant.F16
					k = cached("Embed"+w.Type.String(), func() *kernel.Kernel { return ops.EmbedFloat(f16) })
				case quant.BF16:
					k = cached("EmbedBF16", func() *kernel.Kernel { return ops.Embed(ops.BF16) })
				default:
					d, ok := layoutBlock(w)
					if !ok {
						return view{}, fmt.Errorf("node %d (embed): no GPU kernel decodes %s (%s)", i, w.Type, w.GGUF)
					}
					k = cached("Embed"+d.Name, func() *kernel.Kernel { return ops.Embed(d) })
				}
				p.call(i, k, weight(n.Weight), stepToks(p, rows), out[i], n.Cols)
			case dsl.OpMatMul:
				actQ8_0, actNorm = false, nil
				if fused[i] { // an up projection done with its gate (SwiGLU), a stack's done by its first
					break
				}
				w := &m.Weights[n.Weight]
				wv := weight(n.Weight)
				x, y, xr := in(0), out[i], rows
				if rows > 1 && i == id && !p.hidden && !all {
					// only the last real row's logits: that row alone
					cols := x.n / rows
					lr := p.add(alloc{name: "last row", kind: kernel.F32, n: cols})
					p.call(i, cached("CopyRow", ops.CopyRow), x, stepAll(p), view{lr, 0, cols})
					x, y, xr = view{lr, 0, cols}, view{y.a, y.off, n.Cols}, 1
				}
				cols := x.n / xr
				var mm *kernel.Kernel // multiplies xr rows at once
				tiled := false        // the product is planned (MatMulBlock)
				var dotIn []any       // an integer mat-vec's activation (MatVecDot*)
				var k *kernel.Kernel
				// onTiles: a prefill product on the tensor cores
				onTiles := xr > 1 && p.tiles && cols%kernel.TileK == 0
				// rounded is x as the rounding kernel rk leaves it (of kind
				// xk: f32, or f16 for the tensor cores) in its scratch. q, k
				// and v (gate and up) read one activation: rounded once,
				// while no node has written its slot since (only roundings
				// write the scratches)
				rounded := func(rk *kernel.Kernel, xk kernel.Kind) view {
					sc, scName := &scratch, "quantized activations"
					if xk == kernel.U16 {
						sc, scName = &scratch16, "quantized activations (f16)"
					}
					if *sc < 0 {
						*sc = p.add(alloc{name: scName, kind: xk})
					}
					p.allocs[*sc].n = max(p.allocs[*sc].n, x.n)
					sx := view{*sc, 0, x.n}
					if last.rk != rk || last.x != x {
						p.call(i, rk, x, sx)
					}
					last.rk, last.x = rk, x
					return sx
				}
				// tileProduct multiplies the f16 activation xh by w decoded to
				// f16 by d (once, into a resident copy while the budget has
				// room, else every step into a shared scratch) on the tensor
				// cores
				tileProduct := func(d ops.BlockDecode, xh view) {
					nw := n.Cols * cols
					dequant := cached("DequantF16"+d.Name, func() *kernel.Kernel { return ops.DequantF16(d) })
					var wh view
					if a, ok := resident16[n.Weight]; ok {
						wh = view{a, 0, nw}
					} else if need := int64(2 * nw); need <= p.f16Left {
						a := p.add(alloc{name: w.GGUF + " (f16)", kind: kernel.U16, n: nw, resident: true})
						resident16[n.Weight], p.f16Left = a, p.f16Left-need
						wh = view{a, 0, nw}
						p.setup = append(p.setup, launch{k: dequant, args: []any{wv, wh}, node: i})
					} else {
						if wf16 < 0 {
							wf16 = p.add(alloc{name: "f16 weights", kind: kernel.U16})
						}
						p.allocs[wf16].n = max(p.allocs[wf16].n, nw)
						wh = view{wf16, 0, nw}
						p.call(i, dequant, wv, wh)
					}
					sh := p.blockShape(blockKey{xr, n.Cols, cols})
					p.call(i, cached("MatMulBlockF16 "+sh.String(), func() *kernel.Kernel { return ops.MatMulBlock(sh, kernel.U16) }), xh, wh, y, cols)
					tiled = true
				}
				switch w.Type {
				case quant.F32:
					k = cached("MatVecWarpF32", ops.MatVecWarpF32)
				case quant.F16:
					// a prefill product on the tensor cores: the activation
					// rounded to f16 as the mat-vec rounds it, the matrix
					// copied into the f16 operand (a launch per row took
					// the whole matrix's bytes a row)
					k = cached("MatVecWarpF16", ops.MatVecWarpF16)
					if onTiles {
						tileProduct(ops.F16, rounded(cached("RoundF16", ops.RoundF16), kernel.U16))
					}
				case quant.BF16:
					// the activation rounded to bf16 as the CPU rounds it:
					// in the mat-vec, or before a product on the tensor
					// cores, then to f16 (exact in f16's range) with the
					// matrix
					k = cached("MatVecWarpBF16", ops.MatVecWarpBF16)
					if onTiles {
						tileProduct(ops.BF16, rounded(cached("RoundBF16F16", ops.RoundBF16F16), kernel.U16))
					}
				default:
					d, ok := layoutBlock(w)
					if !ok {
						return view{}, fmt.Errorf("node %d (matmul): no GPU kernel multiplies %s (%s)", i, w.Type, w.GGUF)
					}
					if integerDot(w.Type) && (xr == 1 || all) {
						qname, qmk, qk := dotQuantizer(w.Type)
						if actQ8_0 = q8Act[i] && xr == 1; actQ8_0 {
							qname, qmk, qk = "QuantizeQ8_0", ops.QuantizeQ8_0, 32
						}
						if xr == 1 {
							actNorm = normAct[i]
						}
						var fold *launch // the SwiGLU that quantizes x itself
						var foldK *kernel.Kernel
						if xr == 1 && swigluQ8_0() && !actQ8_0 && len(uses[n.In[0]]) == 1 && len(*p.dst) > 0 {
							// the SwiGLU before quantizes its own output
							// (ops.DotSwiGLUQ8_0) where this mat-vec alone
							// reads it and takes it in Q8_0
							prev := &(*p.dst)[len(*p.dst)-1]
							l := deviceLayout(w.Type, cols)
							sh, ok := p.matVecs[prev.k]
							if ok && sh.form == "SwiGLU" && prev.args[len(prev.args)-1] == x && (l == "Q4_K" || l == "Q6_KA") {
								sh.shape = swigluQ8_0Shape(sh.shape)
								if lk := foldKernel(sh, swigluQ8_0Counted()); lk != nil {
									qk, actQ8_0, fold, foldK = 32, true, prev, lk
								}
							}
						}
						// a decode mat-vec in integers: the activation's
						// quants and scales in its partner type, shared as
						// the rounding is
						xq, xd := actQuants(x.n, qk)
						if fold != nil {
							xq, xd = actQuantsBeside(fold.args, x.n, qk)
							fold.k = foldK
							fold.args = append(fold.args, x, xq, xd)
							if foldK.Epilogue != nil {
								fold.args = append(fold.args, blockCounts(x.n/32))
							}
							last.rk = nil // x's quants are no quantizer's: share them with nothing
						} else {
							quantize := cached(qname, qmk)
							switch {
							case last.rk == quantize && last.x == x:
								xq, xd = last.q, last.d
							case actNorm != nil:
								return view{}, fmt.Errorf("node %d (matmul): the norm before was folded into a launch, its quants since overwritten", i)
							default:
								p.call(i, quantize, x, xq, xd)
							}
							last = rounding{quantize, x, xq, xd}
						}
						dotIn = append([]any{xq, xd}, actNorm...)
						k = cached(dotMatVec("", w.Type, n.Cols, cols, xr)) // xr > 1: every row's products, each weight read once
						if xr > 1 {
							break
						}
						if st, ok := stackOf[i]; ok {
							// the stack's rows in one launch, from its first
							lw, ly := weights[g.Nodes[st[len(st)-1]].Weight], out[st[len(st)-1]]
							wv = view{wv.a, wv.off, lw.off + lw.n - wv.off}
							y = view{y.a, y.off, ly.off + ly.n - y.off}
							k = cached(dotMatVec("", w.Type, y.n, cols, 1))
							for _, j := range st[1:] {
								fused[j] = true
							}
						}
						break
					}
					// a prefill product on the tensor cores: the matrix
					// decoded to f16 (once, or once a step), the activations
					// rounded as the mat-vecs' (llama.cpp's MMQ does so too),
					// then to f16 for MatMulBlock to stage as they are
					xk, suffix := kernel.F32, "" // the rounded activation's kind
					if onTiles {
						xk, suffix = kernel.U16, "F16"
					}
					var rk *kernel.Kernel
					switch quant.VecDotType(w.Type) {
					case quant.Q8_0, quant.Q8_1:
						rk = cached("QuantRoundQ8_0"+suffix, func() *kernel.Kernel { return ops.QuantRoundWarp(ops.QuantRoundQ8_0To(xk)) })
					case quant.Q8_K:
						rk = cached("QuantRoundQ8_K"+suffix, func() *kernel.Kernel { return ops.QuantRoundWarp(ops.QuantRoundQ8_KTo(xk)) })
					default:
						return view{}, fmt.Errorf("node %d (matmul): no activation rounding for %s", i, w.Type)
					}
					x = rounded(rk, xk)
					if onTiles {
						tileProduct(d, x)
						break
					}
					if mk, ok := ops.WarpMatVecs()[d.Name]; ok {
						k = cached("MatVecWarp"+d.Name, mk)
					} else {
						k = cached("MatVec"+d.Name, func() *kernel.Kernel { return ops.MatVec(d) })
					}
					if mw, ok := ops.MatMulWarp(d.Name); ok && xr > 1 { // measured 2.8× MatMulRows on the 1B prefill
						mm = cached("MatMulWarp"+d.Name, func() *kernel.Kernel { return mw })
					} else if xr > 1 {
						mm = cached("MatMulRows"+d.Name, func() *kernel.Kernel { return ops.MatMulRows(d) })
					}
				}
				if tiled {
					break
				}
				if role, ok := ropeMV[i]; ok && dotIn != nil {
					// q, k and v as their attention's RopeKVStore would leave them
					st := stackOf[i]
					if st == nil {
						st = []int{i}
					}
					nq, nk := 0, 0
					for _, j := range st {
						switch ropeMV[j].part {
						case 0:
							nq += g.Nodes[j].Cols
						case 1:
							nk += g.Nodes[j].Cols
						}
					}
					f := ropeKV[role.attn]
					r := g.Nodes[f.q].Rope
					fa, ts, err := ropeFreqs(f.q)
					if err != nil {
						return view{}, err
					}
					kc, vc := caches(g.Nodes[role.attn])
					sh := p.dotShape(dotKey{"", w.Type, y.n, cols})
					if sh.Rows%2 != 0 {
						sh.Rows = 2 // pairs; the plain form's rows are even (heads of even width)
					}
					l := deviceLayout(w.Type, cols)
					if actQ8_0 {
						l += "Q8_0"
					}
					sh.Norm = actNorm != nil
					rk := cached(fmt.Sprintf("MatVecDotRopeKV%s%s", l, sh), func() *kernel.Kernel { return p.matVec("RopeKV", l, sh) })
					p.call(i, rk, append(append([]any{wv}, dotIn...), y, whole(kc, p), whole(vc, p), stepAll(p), whole(fa, p),
						nq, nk, r.HeadDim, r.Dims, ts, r.FreqScale)...)
					break
				}
				next, hasNext := epilogues[i]
				var ek func() *kernel.Kernel
				var ename string
				xin := []any{x}
				dotForm := map[dsl.Op]string{dsl.OpAdd: "Add", dsl.OpSiLU: "SiLU", dsl.OpMul: "Mul"}[next.op]
				switch {
				case dotIn != nil && dotForm != "":
					ename, ek = dotMatVec(dotForm, w.Type, n.Cols, cols, xr)
				case next.op == dsl.OpAdd:
					ek, ename = ops.WarpMatVecsAdd()[w.Type.String()], "MatVecWarpAdd"+w.Type.String()
				case next.op == dsl.OpSiLU:
					ek, ename = ops.WarpMatVecsSiLU()[w.Type.String()], "MatVecWarpSiLU"+w.Type.String()
				}
				if dotIn != nil {
					xin = dotIn
				}
				up, swiglu := swiglus[i]
				if swiglu && (dotIn == nil || m.Weights[g.Nodes[up].Weight].Type != w.Type) {
					swiglu = false
				}
				switch {
				case swiglu:
					// gate and up projections in one launch: the gate's SiLU
					// never stored, the Mul after them done as it stores
					mul := epilogues[up].node
					name, mk := dotMatVec("SwiGLU", w.Type, n.Cols, cols, xr)
					p.call(i, cached(name, mk), append(append([]any{wv, weight(g.Nodes[up].Weight)}, dotIn...), out[mul])...)
					fused[next.node], fused[up], fused[mul] = true, true, true
				case (xr == 1 || dotIn != nil) && hasNext && ek != nil && (x.a == scratch || dotIn != nil):
					// y is the next node's; the kernel reads only the
					// weights, the scratch (or quants) and (an Add, a Mul)
					// the other operand
					args := append([]any{wv}, xin...)
					if next.op == dsl.OpAdd || next.op == dsl.OpMul {
						args = append(args, out[next.other])
					}
					p.call(i, cached(ename, ek), append(args, out[next.node])...)
					fused[next.node] = true
				case xr == 1 || dotIn != nil:
					p.call(i, k, append(append([]any{wv}, xin...), y)...)
				case mm != nil:
					p.call(i, mm, wv, x, y, cols)
				default: // a mat-vec a row
					for r := 0; r < xr; r++ {
						p.call(i, k, wv, view{x.a, x.off + r*cols, cols}, view{y.a, y.off + r*n.Cols, n.Cols})
					}
				}
			case dsl.OpAdd:
				if !fused[i] {
					p.call(i, cached("AddF32", ops.AddF32), in(0), in(1), out[i])
				}
			case dsl.OpMul:
				if !fused[i] {
					p.call(i, cached("MulF32", ops.MulF32), in(0), in(1), out[i])
				}
			case dsl.OpScale:
				p.call(i, cached("ScaleF32", ops.ScaleF32), in(0), out[i], n.F)
			case dsl.OpSiLU:
				if !fused[i] {
					p.call(i, cached("SiLUF32", ops.SiLUF32), in(0), out[i])
				}
			case dsl.OpRMSNorm:
				if ropeLate(ropeKV, i) {
					break // done by its attention's RopeKVStoreNorm
				}
				// Groups (per-head norms) are rows of the group's width.
				perRow := rows > 1 || n.Group() != n.Cols
				if n.Weight < 0 {
					if perRow {
						p.call(i, cached("RMSNormRowsNoWeight", func() *kernel.Kernel { return ops.RMSNormRows(false) }), in(0), out[i], n.F, n.Group())
					} else {
						p.call(i, cached("RMSNormNoWeight", func() *kernel.Kernel { return ops.RMSNormCTA(false) }), in(0), out[i], n.F)
					}
					break
				}
				wv, err := vector(n.Weight)
				if err != nil {
					return view{}, err
				}
				if rows == 1 && !all && normFold() && n.Group() == n.Cols && n.Cols%32 == 0 && len(*p.dst) > 0 {
					if own, ok := normFoldReaders(i); ok {
						// the residual Add's mat-vec before begins the norm
						// (ops.DotAddNormQ8_0): x·w in Q8_0 and the parts of
						// Σx², its readers scale their sums by 1/rms
						prev := &(*p.dst)[len(*p.dst)-1]
						if ls, isDot := p.matVecs[prev.k]; isDot && ls.form == "Add" && prev.args[len(prev.args)-1] == in(0) {
							if lk := foldKernel(ls, normFoldCounted()); lk != nil {
								xq, xd := actQuantsBeside(prev.args, n.Cols, 32)
								if normParts < 0 {
									normParts = p.add(alloc{name: "norm parts", kind: kernel.F32})
								}
								p.allocs[normParts].n = max(p.allocs[normParts].n, n.Cols/32)
								ss := view{normParts, 0, n.Cols / 32}
								prev.k = lk
								prev.args = append(prev.args, in(0), whole(wv, p), xq, xd, ss)
								if lk.Epilogue != nil {
									prev.args = append(prev.args, blockCounts(n.Cols/32))
								}
								for _, u := range uses[i] {
									normAct[u], q8Act[u] = []any{ss, n.F}, own[u]
								}
								normQuant = &rounding{cached("QuantizeQ8_0", ops.QuantizeQ8_0), out[i], xq, xd}
								break
							}
						}
					}
				}
				if qn, qmk, qk := quantizedBy(i); (rows == 1 || all) && n.Group() == n.Cols && qn != "" && n.Cols%qk == 0 {
					// every reader is an integer decode mat-vec: normalize
					// and quantize in one launch, the f32 rows never stored
					xq, xd := actQuants(rows*n.Cols, qk)
					p.call(i, cached("RMSNorm"+qn, func() *kernel.Kernel { return ops.RMSNormQuantize(qk) }), in(0), whole(wv, p), xq, xd, n.F)
					normQuant = &rounding{cached(qn, qmk), out[i], xq, xd}
					break
				}
				if perRow {
					p.call(i, cached("RMSNormRows", func() *kernel.Kernel { return ops.RMSNormRows(true) }), in(0), whole(wv, p), out[i], n.F, n.Group())
				} else {
					p.call(i, cached("RMSNorm", func() *kernel.Kernel { return ops.RMSNormCTA(true) }), in(0), whole(wv, p), out[i], n.F)
				}
			case dsl.OpRoPE:
				if ropeLate(ropeKV, i) {
					break // done by its attention's RopeKVStore
				}
				r := n.Rope
				fa, ts, err := ropeFreqs(i)
				if err != nil {
					return view{}, err
				}
				mode, dims := r.Mode, r.Dims
				k := cached(fmt.Sprintf("rope%d/%d", mode, dims), func() *kernel.Kernel { return ops.RopePosWarp(mode, dims) })
				p.call(i, k, in(0), out[i], stepAll(p), whole(fa, p), r.HeadDim, r.Heads, ts, r.FreqScale)
			case dsl.OpAttention:
				a := n.Attn
				dim := a.KVHeads * a.HeadDim
				if n.Layer < 0 {
					return view{}, fmt.Errorf("node %d: attention outside a block", i)
				}
				if seen[n.Layer] {
					return view{}, fmt.Errorf("node %d: a second attention in block %d", i, n.Layer)
				}
				seen[n.Layer] = true
				kc, vc := caches(n)
				qIn := in(0) // the rotated query
				if f, ok := ropeKV[i]; ok && ropeByMV[i] {
					qi, _ := f.inputs(g)
					qIn = out[qi] // the projections rotated and cached q, k and v as they stored them
				} else if ok {
					// both RoPEs (and the heads' norms) and the cache store in one launch
					r := g.Nodes[f.q].Rope
					fa, ts, err := ropeFreqs(f.q)
					if err != nil {
						return view{}, err
					}
					mode, dims := r.Mode, r.Dims
					qi, ki := f.inputs(g)
					args := []any{out[qi], out[ki], in(2)}
					var k *kernel.Kernel
					if f.qNorm >= 0 {
						qw, err := vector(g.Nodes[f.qNorm].Weight)
						if err != nil {
							return view{}, err
						}
						kw, err := vector(g.Nodes[f.kNorm].Weight)
						if err != nil {
							return view{}, err
						}
						args = append(args, whole(qw, p), whole(kw, p))
						k = cached(fmt.Sprintf("ropekvnorm%d/%d", mode, dims), func() *kernel.Kernel { return ops.RopeKVStoreNorm(mode, dims) })
					} else {
						k = cached(fmt.Sprintf("ropekv%d/%d", mode, dims), func() *kernel.Kernel { return ops.RopeKVStore(mode, dims) })
					}
					args = append(args, out[f.q], whole(kc, p), whole(vc, p), stepAll(p), whole(fa, p), r.HeadDim)
					if f.qNorm >= 0 {
						args = append(args, g.Nodes[f.qNorm].F)
					}
					p.call(i, k, append(args, ts, r.FreqScale)...)
					if out[f.q].a == last.x.a {
						last.rk = nil
					}
				} else {
					p.call(i, cached("KVStore", ops.KVStore), in(1), in(2), whole(kc, p), whole(vc, p), stepAll(p), dim)
				}
				group := a.Heads / a.KVHeads
				if p.tiles && ops.AttnBlockWidth(a.HeadDim) && (rows > 1 || a.Heads >= decodeBlockHeads) {
					// flash attention on the tensor cores: in prefill steps
					// a CTA per 64 rows of a head (a 512-row step of the 1B
					// attended in 1.6 ms a layer by AttentionSplit, 15 µs
					// so), in one-row steps a warp's CTA per head, walking
					// the positions alone (H200, qwen3's heads: 11 µs at
					// position 64 where AttentionSplit+Merge took 29, 51 at
					// 2047 against 80)
					hd, warps := a.HeadDim, ops.AttnBlockWarps
					if rows == 1 {
						warps = 1
					}
					// a one-row step past a tier's position (decodeSplits) cuts
					// the heads' positions over CTAs instead
					// (AttentionBlockSplit, folded by AttentionMerge):
					// its launches replace this one in the long step
					long := func(mkMerge func() *kernel.Kernel, margs ...any) error {
						for t, sp := range splits {
							if rows > 1 || p.context <= sp.from {
								return nil
							}
							if parts < 0 {
								parts = p.add(alloc{name: "attention pieces", kind: kernel.F32})
							}
							np := ops.AttnPartLen(a.Heads, sp.chunks, hd)
							p.allocs[parts].n = max(p.allocs[parts].n, np)
							split := cached(fmt.Sprintf("AttentionBlockSplitD%d", hd), func() *kernel.Kernel { return ops.AttentionBlockSplit(hd) })
							merge, err := specialized(cached, mkMerge, map[string]any{"headDim": hd, "heads": a.Heads, "chunks": sp.chunks})
							if err != nil {
								return err
							}
							at, was := len(*p.dst)-1, p.dst
							var alt []launch
							p.dst = &alt
							p.call(i, split, qIn, whole(kc, p), whole(vc, p), stepAll(p), view{parts, 0, np}, a.Heads, group, dim, sp.chunks, a.Scale)
							p.call(i, merge, append([]any{view{parts, 0, np}, stepAll(p), out[i]}, margs...)...)
							p.dst = was
							alts[t][at] = alt
						}
						return nil
					}
					qn, qmk, qk := quantizedBy(i)
					q4K, toQ4K := q4KReaders(i)
					if rows == 1 && hd%32 == 0 && (qk == 32 || toQ4K) {
						// the attention quantizes its output to Q8_0 (a block
						// is 4 tiles of a row's quad): where every reader
						// quantizes it so, or every reader is a Q4_K mat-vec,
						// which takes it as Q4_KQ8_0; either way the o
						// projection's quantizer needs no launch
						xq, xd := actQuants(n.Cols, 32)
						k := cached(fmt.Sprintf("AttentionBlockD%dW%dQ8_0", hd, warps), func() *kernel.Kernel { return ops.AttentionBlockQ8_0(hd, warps) })
						if rows == 1 && attnHeads {
							k = headsAttention(cached, hd, true)
						}
						p.call(i, k, qIn, whole(kc, p), whole(vc, p), stepAll(p), out[i], xq, xd, a.Heads, group, dim, a.Scale)
						if err := long(ops.AttentionMergeQ8_0, xq, xd); err != nil {
							return view{}, err
						}
						if qk != 32 {
							for _, u := range q4K {
								q8Act[u] = true
							}
							qn, qmk = "QuantizeQ8_0", ops.QuantizeQ8_0
						}
						normQuant = &rounding{cached(qn, qmk), out[i], xq, xd}
						break
					}
					k := cached(fmt.Sprintf("AttentionBlockD%dW%d", hd, warps), func() *kernel.Kernel { return ops.AttentionBlockWarps(hd, warps) })
					if rows == 1 && attnHeads {
						k = headsAttention(cached, hd, false)
					}
					p.call(i, k, qIn, whole(kc, p), whole(vc, p), stepAll(p), out[i], a.Heads, group, dim, a.Scale)
					if err := long(ops.AttentionMerge); err != nil {
						return view{}, err
					}
					break
				}
				if scores < 0 { // one pair's scores a head, shared by every layer's attention
					scores = p.add(alloc{name: "attention scores", kind: kernel.F32})
				}
				// other steps split each (row, head)'s positions over
				// warps (AttentionSplit): decode steps need it, their few
				// pairs would leave the GPU idle a warp each
				ns := a.Heads * rows * p.kvRows
				p.allocs[scores].n = max(p.allocs[scores].n, ns)
				if parts < 0 {
					parts = p.add(alloc{name: "attention pieces", kind: kernel.F32})
				}
				np := ops.AttnPartLen(rows*a.Heads, ops.AttnSplitChunks, a.HeadDim)
				p.allocs[parts].n = max(p.allocs[parts].n, np)
				// specialized to the model's heads: constant trip counts
				// and divisors (a runtime head dimension left the q·k dot a
				// loop of dependent loads, 20 µs a layer on the 1B)
				mkSplit := ops.AttentionSplit
				if _, ok := ropeKV[i]; ok { // RopeKVStore left q rounded to f16
					mkSplit = ops.AttentionSplitRounded
				}
				split, err := specialized(cached, mkSplit, map[string]any{"headDim": a.HeadDim, "heads": a.Heads, "group": group,
					"kvDim": dim, "ctx": p.kvRows, "chunks": ops.AttnSplitChunks, "scale": a.Scale})
				if err != nil {
					return view{}, err
				}
				// where every reader quantizes the output (to Q8_0: a block a
				// lane each of a head's warp; to Q8_K: a CTA a block), the
				// merge does
				mkMerge, margs := ops.AttentionMerge, []any{view{parts, 0, np}, stepAll(p), out[i]}
				if qn, qmk, qk := quantizedBy(i); rows == 1 && ((qk == 32 && a.HeadDim%32 == 0) || (qk == 256 && n.Cols%256 == 0)) {
					xq, xd := actQuants(n.Cols, qk)
					mkMerge, margs = ops.AttentionMergeQ8_0, append(margs, xq, xd)
					if qk == 256 {
						mkMerge = ops.AttentionMergeQ8_K
					}
					normQuant = &rounding{cached(qn, qmk), out[i], xq, xd}
				}
				merge, err := specialized(cached, mkMerge, map[string]any{"headDim": a.HeadDim, "heads": a.Heads, "chunks": ops.AttnSplitChunks})
				if err != nil {
					return view{}, err
				}
				p.call(i, split, qIn, whole(kc, p), whole(vc, p), view{parts, 0, np}, stepAll(p), view{scores, 0, ns})
				p.call(i, merge, margs...)
			default:
				return view{}, fmt.Errorf("node %d: op %s has no GPU kernel yet", i, n.Op)
			}
			if out[i].n > 0 && out[i].a == last.x.a { // a node wrote where the rounded activation came from
				last.rk = nil
			}
			if normQuant != nil { // the quants hold this node's row: its readers skip the quantizer
				last = *normQuant
				normQuant = nil
			}
		}
		if p.hidden || all { // every row goes on to the next stage, or is returned
			return out[id], nil
		}
		return view{out[id].a, out[id].off, g.Nodes[id].Cols}, nil
	}
	var err error
	splits = splitTiers()
	alts = make([]map[int][]launch, len(splits))
	for t := range alts {
		alts[t] = map[int][]launch{}
	}
	if p.logits, err = lower(1, &p.launches, false); err != nil {
		return nil, err
	}
	for t, sp := range splits {
		if len(alts[t]) == 0 {
			continue
		}
		ls := longStep{from: sp.from}
		for i, l := range p.launches {
			if alt, ok := alts[t][i]; ok {
				ls.launches = append(ls.launches, alt...)
				continue
			}
			ls.launches = append(ls.launches, l)
		}
		p.longs = append(p.longs, ls)
	}
	if ropeStacks() {
		p.stackRopeKV()
	}
	if rows > 1 {
		if p.plogits, err = lower(rows, &p.prefill, false); err != nil {
			return nil, err
		}
		if !p.hidden && !slices.ContainsFunc(g.Nodes, func(n dsl.Node) bool { return n.Op == dsl.OpRows }) {
			// whole graphs only: a stage's rows come from the stage before
			for _, n := range verifyRows {
				if n = min(n, rows); n <= p.vrows() {
					continue
				}
				v := verifyStep{rows: n}
				if v.logits, err = lower(n, &v.launches, true); err != nil {
					return nil, err
				}
				p.verify = append(p.verify, v)
			}
		}
	}
	return p, nil
}

// oneRowSteps are the one-row steps' launches, the short step's then each
// long step's: what a transform of decode steps rewrites alike.
func (p *plan) oneRowSteps() []*[]launch {
	steps := []*[]launch{&p.launches}
	for i := range p.longs {
		steps = append(steps, &p.longs[i].launches)
	}
	return steps
}

// decodeAt is the one-row step's launches at position pos.
func (p *plan) decodeAt(pos int) []launch {
	if t := p.longAt(pos); t >= 0 {
		return p.longs[t].launches
	}
	return p.launches
}

// longAt is the index of the long step that runs position pos, −1 for the
// one-row step's launches.
func (p *plan) longAt(pos int) int {
	for t := len(p.longs) - 1; t >= 0; t-- {
		if pos >= p.longs[t].from {
			return t
		}
	}
	return -1
}

// longStep is the one-row step from position from on.
type longStep struct {
	from     int
	launches []launch
}

// kernelList is every distinct kernel the plan launches, in first-use order.
func (p *plan) kernelList() []*kernel.Kernel {
	seen := map[*kernel.Kernel]bool{}
	var ks []*kernel.Kernel
	all := append(append(p.setup[:len(p.setup):len(p.setup)], p.launches...), p.prefill...)
	for _, l := range p.longs {
		all = append(all, l.launches...)
	}
	for _, v := range p.verify {
		all = append(all, v.launches...)
	}
	for _, l := range all {
		if !seen[l.k] {
			seen[l.k] = true
			ks = append(ks, l.k)
		}
	}
	return ks
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		u := math.Float32bits(x)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return b
}

// Kernels lists the kernels the runner renders for m: what NewRunner
// compiles for the device, available without one (for tools and tests).
func Kernels(m *exec.Model) ([]*kernel.Kernel, error) {
	p, err := newPlan(m, 1, 2)
	if err != nil {
		return nil, err
	}
	return append(p.kernelList(), ops.ArgMaxCTA()), nil // the runner's ForwardGreedy adds the argmax
}

// specialized is the kernel mk makes with the scalars in vals fixed
// (kernel.Specialize), built once a plan.
func specialized(cached func(string, func() *kernel.Kernel) *kernel.Kernel, mk func() *kernel.Kernel, vals map[string]any) (*kernel.Kernel, error) {
	k, err := kernel.Specialize(mk(), vals)
	if err != nil {
		return nil, err
	}
	return cached(k.Name, func() *kernel.Kernel { return k }), nil
}

// decodeSplits are the positions from which a one-row step that attends
// with a CTA walking every block of positions (AttentionBlockHeads, or
// AttentionBlockD<hd>W1) cuts the positions over CTAs instead
// (AttentionBlockSplit + AttentionMerge, a long step: its own CUDA graph;
// the merge's launch costs more than it saves while the walk is short),
// and into how many pieces, by position (a later tier's from is larger).
// Measured end to end (jitllm speed -d, tg64, 2026-12-06): split from 512
// the 8B decodes 356.6 tok/s at depth 512 against 323.4 from 1024 (H100),
// qwen3 803.8 against 784.7, both the same at 1024 and 4096; from 256 the
// 8B gained 3% at depth 256 and qwen3 lost 2% (H200). Pieces (H200, the
// merge's weights once a piece): at depth 4096 16 and 32 within 2% (8B
// 362.9 / 370.5, qwen3 760.3 / 753.1), at 16384 32 faster (8B 281.5 /
// 307.9, qwen3 550.5 / 574.1); earlier 64 and 128 were slower at every
// depth: each piece costs the merge a fold and a CTA. The second tier's
// 8192 lies between those depths, itself not measured. A variable for the
// tests; JITLLM_ATTN_SPLIT_FROM (the first tier's position) and
// JITLLM_ATTN_CHUNKS (one tier of that many pieces) override it.
var decodeSplits = []splitTier{{from: 512, chunks: 16}, {from: 8192, chunks: 32}}

// splitTier is a long step: the split attention from position from on, in
// chunks pieces.
type splitTier struct{ from, chunks int }

// splitTiers is decodeSplits with the environment's overrides, for
// comparisons on a device.
func splitTiers() []splitTier {
	ts := slices.Clone(decodeSplits)
	if v, err := strconv.Atoi(os.Getenv("JITLLM_ATTN_SPLIT_FROM")); err == nil && v > 0 && len(ts) > 0 {
		first := splitTier{from: v, chunks: ts[0].chunks}
		ts = append([]splitTier{first}, slices.DeleteFunc(ts[1:], func(t splitTier) bool { return t.from <= v })...)
	}
	if v, err := strconv.Atoi(os.Getenv("JITLLM_ATTN_CHUNKS")); err == nil && v > 0 && v <= 1024 && len(ts) > 0 {
		ts = []splitTier{{from: ts[0].from, chunks: v}}
	}
	return ts
}

// headsAttention is the one-row step's short attention, a CTA a key-value
// group (ops.AttentionBlockHeadsSplit), its blocks split over
// JITLLM_ATTN_WARPS warps where set above 1 (one warp, the default, walks
// the blocks in turn). Each warp takes two stages of a key and a value
// block (68 KiB at a head width of 128), so the warps are as many as fit
// attnSplitShared.
func headsAttention(cached func(string, func() *kernel.Kernel) *kernel.Kernel, hd int, q8 bool) *kernel.Kernel {
	w := min(max(envInt("JITLLM_ATTN_WARPS", 1), 1), 8)
	for w > 1 && ptx.AttnShared(kernel.AttnShape{Warps: w, HD: hd, Heads: true, Split: true}) > attnSplitShared {
		w--
	}
	name := fmt.Sprintf("AttentionBlockHeadsD%dS%dQ8_0%v", hd, w, q8)
	return cached(name, func() *kernel.Kernel { return ops.AttentionBlockHeadsSplit(hd, q8, w) })
}

// attnSplitShared bounds a split short attention's shared memory: what a
// CTA may take on sm_80 (163 KiB; sm_90 227 KiB).
const attnSplitShared = 160 << 10

// decodeBlockHeads is the fewest heads a one-row step attends with
// AttentionBlock, a CTA a head: fewer would leave the GPU idle while each
// walks its positions (AttentionSplit cuts them in pieces). A variable
// for the tests, which lower it to check that path on the small models.
var decodeBlockHeads = 16

// prefillBlocks are the prefill products' CTA blocks, largest first:
// 128×128 (four warps of 64×64), 64×128 (four of 32×64), 64×64 (four of
// 32×32).
var prefillBlocks = []kernel.BlockShape{{WM: 2, WN: 2, M: 4, N: 8}, {WM: 2, WN: 2, M: 2, N: 8}, {WM: 2, WN: 2, M: 2, N: 4}}

// fillCTAs is the CTAs a product should have to fill the device: the
// H200's 132 SMs, where the rule below was measured.
const fillCTAs = 132

// prefillBlock is the CTA block of a product of rows activation rows and
// n weight rows: the largest of prefillBlocks that still gives every SM a
// CTA, else the smallest.
func prefillBlock(rows, n int) kernel.BlockShape {
	for _, sh := range prefillBlocks {
		if (rows+sh.Rows()-1)/sh.Rows()*((n+sh.Cols()-1)/sh.Cols()) >= fillCTAs {
			return sh
		}
	}
	return prefillBlocks[len(prefillBlocks)-1]
}

// dotShape is the shape of an integer decode mat-vec of store form form
// over a matrix of weight type t and rows rows (ops.DotShape). Measured on
// the H200 for every shape against the 1B's, the 8B's and qwen3-0.6B's
// matrices, weights streamed from memory (TestGPUMatVecDot, docs/perf):
// each rule's shape is within 11% of the best on every matrix it covers
// but one or two launch-bound small ones. The output heads take 2 rows a
// warp (CTAs of more threads were up to 1.7× slower there), the SwiGLU's
// two matrices one row a warp; otherwise Q4_K 2 rows a warp, Q6_K (twice
// the instructions a byte) 2 rows a CTA of 128, Q8_0 2 rows a CTA of 64,
// each thread two units a trip. Q8_0 mat-vecs prefetch their rows before
// they wait for the kernel before them (dependent launches): qwen3's
// decode 1008 -> 1066 tok/s, where the Q4_K models' lost 1-8% with it
// (1B 1373 -> 1316, 8B 400 -> 368: larger matrices, whose prefetches
// crowd the kernel still running). In phased steps (phases.go) every
// mat-vec prefetches: a phase's prefetches go before the barrier that
// starts it.
func dotShape(form string, t quant.Type, rows int) ops.DotShape {
	var sh ops.DotShape
	switch {
	case rows >= 32768:
		sh = ops.DotShape{Rows: 2, Threads: 32, Unroll: 1}
	case form == "SwiGLU":
		sh = ops.DotShape{Rows: 1, Threads: 32, Unroll: 2}
	case t == quant.Q4_K:
		sh = ops.DotShape{Rows: 2, Threads: 32, Unroll: 2}
	case t == quant.Q6_K:
		sh = ops.DotShape{Rows: 2, Threads: 128, Unroll: 2}
	default:
		sh = ops.DotShape{Rows: 2, Threads: 64, Unroll: 2}
	}
	if rows%sh.Rows != 0 {
		sh.Rows = 1
	}
	sh.Prefetch = t == quant.Q8_0 || phasedPrefetch()
	return sh
}

// ropeKV is an attention whose RoPEs are done in its launch: the RoPE
// nodes of q and k and, where each reads a per-head RMSNorm read by
// nothing else (qwen3's q_norm and k_norm), those norms (-1 without).
type ropeKV struct{ q, k, qNorm, kNorm int }

// ropeKVs finds, for one-row steps, the attentions whose q and k inputs
// are RoPEs read by nothing else, alike in all but their heads: those
// RoPEs (and the per-head norms before them) are done in the attention's
// RopeKVStore launch. It maps the attention's node to them.
func ropeKVs(g *dsl.G, rows int) map[int]ropeKV {
	out := map[int]ropeKV{}
	if rows != 1 {
		return out
	}
	readers := readerCounts(g)
	// headNorm is the per-head weighted RMSNorm that RoPE node r reads,
	// when nothing else reads it
	headNorm := func(r int) int {
		j := g.Nodes[r].In[0]
		n := &g.Nodes[j]
		if n.Op == dsl.OpRMSNorm && n.Weight >= 0 && n.Group() == g.Nodes[r].Rope.HeadDim && n.Group() != n.Cols && readers[j] == 1 {
			return j
		}
		return -1
	}
	for i, n := range g.Nodes {
		if n.Op != dsl.OpAttention || len(n.In) != 3 {
			continue
		}
		qn, kn := n.In[0], n.In[1]
		q, k := &g.Nodes[qn], &g.Nodes[kn]
		if q.Op != dsl.OpRoPE || k.Op != dsl.OpRoPE || qn == kn || readers[qn] != 1 || readers[kn] != 1 {
			continue
		}
		rq, rk := q.Rope, k.Rope
		rk.Heads = rq.Heads
		if rq != rk || rq.HeadDim != n.Attn.HeadDim || (rq.Mode != dsl.RopeNormal && rq.Mode != dsl.RopeNeox) {
			continue
		}
		f := ropeKV{q: qn, k: kn, qNorm: headNorm(qn), kNorm: headNorm(kn)}
		if (f.qNorm < 0) != (f.kNorm < 0) || (f.qNorm >= 0 && g.Nodes[f.qNorm].F != g.Nodes[f.kNorm].F) {
			f.qNorm, f.kNorm = -1, -1 // both heads' norms, of one eps, or neither
		}
		out[i] = f
	}
	return out
}

// ropeLate reports whether node i (a RoPE or a norm) is done by an
// attention's launch.
func ropeLate(ropeKV map[int]ropeKV, i int) bool {
	for _, f := range ropeKV {
		if f.q == i || f.k == i || (f.qNorm >= 0 && (f.qNorm == i || f.kNorm == i)) {
			return true
		}
	}
	return false
}

// inputs are the values f's launch reads in place of its nodes' outputs:
// the norms' inputs where it normalizes, else the RoPEs'.
func (f ropeKV) inputs(g *dsl.G) (q, k int) {
	if f.qNorm >= 0 {
		return g.Nodes[f.qNorm].In[0], g.Nodes[f.kNorm].In[0]
	}
	return g.Nodes[f.q].In[0], g.Nodes[f.k].In[0]
}

// ropeRole is a mat-vec's part in an attention whose RoPEs its launch
// does (ropeMatVecs): the projection it is, and the attention.
type ropeRole struct {
	attn int
	part int // 0 q, 1 k, 2 v
}

// ropeMatVecs finds, for one-row steps, the attentions of ropeKVs whose
// RoPEs the q, k and v projections can do as they store (MatVecDotRopeKV:
// RopeNormal, whose pairs are adjacent rows; no per-head norms, which need
// the whole head): each projection an integer mat-vec read only by its
// RoPE (q, k) or the attention (v), with no epilogue, and where two of
// them share a stack, in the order q, k, v. The RopeKVStore launch is then
// left out. It maps each projection's node to its role;
// JITLLM_ROPE_MATVEC=0 turns it off (for comparisons on a device).
func ropeMatVecs(g *dsl.G, m *exec.Model, ropeKV map[int]ropeKV, stackOf map[int][]int) map[int]ropeRole {
	out := map[int]ropeRole{}
	if os.Getenv("JITLLM_ROPE_MATVEC") == "0" {
		return out
	}
	readers := readerCounts(g)
	epilogues := matVecEpilogues(g, 1)
	for a, f := range ropeKV {
		r := g.Nodes[f.q].Rope
		if f.qNorm >= 0 || r.Mode != dsl.RopeNormal || r.Dims%2 != 0 || r.HeadDim%2 != 0 {
			continue
		}
		qi, ki := f.inputs(g)
		parts := [3]int{qi, ki, g.Nodes[a].In[2]}
		ok := true
		for _, j := range parts {
			n := &g.Nodes[j]
			_, epi := epilogues[j]
			if n.Op != dsl.OpMatMul || readers[j] != 1 || epi || !integerDot(m.Weights[n.Weight].Type) || n.Cols%2 != 0 {
				ok = false
			}
		}
		if !ok || qi == ki || ki == parts[2] || qi == parts[2] {
			continue
		}
		// a stack holding any of them holds them as consecutive parts in order
		role := map[int]int{qi: 0, ki: 1, parts[2]: 2}
		for _, j := range parts {
			st, in := stackOf[j]
			if !in {
				continue
			}
			prev := -1
			for _, x := range st {
				ro, mine := role[x]
				if !mine || (prev >= 0 && ro != prev+1) {
					ok = false
				}
				prev = ro
			}
		}
		if !ok {
			continue
		}
		for part, j := range parts {
			out[j] = ropeRole{attn: a, part: part}
		}
	}
	return out
}

// swiGLUs finds, for one-row steps, the SwiGLU pattern of the feed-forward
// blocks among the epilogues: a gate mat-vec whose SiLU's only reader is
// the Mul that the up projection right after it (reading the same
// activation) ends in. It maps the gate's node to the up projection's.
func swiGLUs(g *dsl.G, epilogues map[int]epilogue) map[int]int {
	out := map[int]int{}
	readers := readerCounts(g)
	for i, e := range epilogues {
		up := i + 2
		if e.op != dsl.OpSiLU || up >= len(g.Nodes) {
			continue
		}
		gate, u := &g.Nodes[i], &g.Nodes[up]
		if eu, ok := epilogues[up]; ok && eu.op == dsl.OpMul && eu.other == e.node && u.Op == dsl.OpMatMul &&
			u.In[0] == gate.In[0] && u.Cols == gate.Cols && readers[e.node] == 1 {
			out[i] = up
		}
	}
	return out
}

// readerCounts is, for each node, how many nodes and outputs read it.
func readerCounts(g *dsl.G) []int {
	n := make([]int, len(g.Nodes))
	for _, x := range g.Nodes {
		for _, j := range x.In {
			n[j]++
		}
	}
	for _, o := range g.Outputs {
		n[o]++
	}
	return n
}

// epilogue is the node right after a mat-vec that the mat-vec can do as
// it stores (an Add of the residual, a SiLU, a Mul by the gate): node is
// it, other an Add's or Mul's input that is not the product.
type epilogue struct {
	op          dsl.Op
	node, other int
}

// matVecEpilogues finds, for one-row steps, the mat-vecs whose only use is
// the Add (x + W·a, a block's residual), SiLU (the gate) or Mul (the up
// projection times the gate's SiLU) right after them: the product then
// never needs its own buffer, and nothing runs between the two that could
// have reused the next node's slot.
func matVecEpilogues(g *dsl.G, rows int) map[int]epilogue {
	out := map[int]epilogue{}
	if rows != 1 {
		return out
	}
	uses := readerCounts(g)
	for i, n := range g.Nodes {
		if n.Op != dsl.OpMatMul || i+1 >= len(g.Nodes) || uses[i] != 1 {
			continue
		}
		e := &g.Nodes[i+1]
		switch {
		case e.Op == dsl.OpSiLU && len(e.In) == 1 && e.In[0] == i:
			out[i] = epilogue{op: dsl.OpSiLU, node: i + 1}
		case (e.Op == dsl.OpAdd || e.Op == dsl.OpMul) && len(e.In) == 2 && e.In[1] == i && e.In[0] != i:
			out[i] = epilogue{e.Op, i + 1, e.In[0]}
		case (e.Op == dsl.OpAdd || e.Op == dsl.OpMul) && len(e.In) == 2 && e.In[0] == i && e.In[1] != i:
			out[i] = epilogue{e.Op, i + 1, e.In[1]}
		}
	}
	return out
}

// stackedMatVecs finds the mat-vecs a one-row step runs as one launch:
// those reading the same activation (q, k and v after the attention's
// norm), each its only product with no epilogue, their matrices of one
// integer-dot type (their rows then quantize and dot alike) and each a
// multiple of 16 bytes long (the next one's view stays 16-aligned). Each
// stack lists its nodes in graph order, two or more of them.
func stackedMatVecs(g *dsl.G, m *exec.Model) [][]int {
	epilogues := matVecEpilogues(g, 1)
	swiglus := swiGLUs(g, epilogues)
	ups := map[int]bool{}
	for gate, up := range swiglus {
		ups[gate], ups[up] = true, true
	}
	byInput := map[int][]int{}
	var inputs []int
	for i, n := range g.Nodes {
		if n.Op != dsl.OpMatMul || ups[i] {
			continue
		}
		if _, ok := epilogues[i]; ok {
			continue
		}
		w := &m.Weights[n.Weight]
		if !integerDot(w.Type) || len(w.Data)%16 != 0 {
			continue
		}
		if len(byInput[n.In[0]]) == 0 {
			inputs = append(inputs, n.In[0])
		}
		byInput[n.In[0]] = append(byInput[n.In[0]], i)
	}
	var stacks [][]int
	for _, in := range inputs {
		// the longest runs of one type among the activation's mat-vecs
		var run []int
		for _, j := range byInput[in] {
			if len(run) > 0 && m.Weights[g.Nodes[j].Weight].Type != m.Weights[g.Nodes[run[0]].Weight].Type {
				if len(run) > 1 {
					stacks = append(stacks, run)
				}
				run = nil
			}
			run = append(run, j)
		}
		if len(run) > 1 {
			stacks = append(stacks, run)
		}
	}
	return stacks
}
