package gpuexec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/cuda"
	"github.com/jitllm/jitllm/runtime/tune"
)

// Decode mat-vec shapes measured on first use. dotShape's rules were
// measured on the H200; another device (other SM counts, caches, clocks)
// may want others. With exec.Options.Tune the runner times candidate
// shapes (ops.DotShape: rows a group, threads a group, units a trip) of
// each of its decode mat-vecs on the device before it binds, keeps the
// fastest (the rule's unless another is tuneMargin faster) and caches the
// choice per device and build (runtime/tune), so later runs read it. A
// shape never changes a result beyond the float order of its tree
// (TestGPUMatchesCPU holds the tuned runner to the CPU's tokens).

// tuneMargin is how much faster than the rule's shape another must time
// to replace it: launches vary by a few percent from run to run.
const tuneMargin = 0.03

// tuneShape is the cache's key of mat-vec d on the device.
func (d dotKey) tuneShape() tune.Shape {
	return tune.Shape{Op: "matvec" + d.form, Type: deviceLayout(d.t, d.cols), Order: "MatVecDot" + d.form, ISA: "ptx", In: d.cols, Out: d.rows, Batch: 1}
}

// dotCandidates are the shapes tried for mat-vec d in mode: the rule's
// first, then (quick) each field of it varied alone or (full) every
// combination; shapes whose rows do not divide d's are left out.
func dotCandidates(d dotKey, mode tune.Mode) []ops.DotShape {
	rule := dotShape(d.form, d.t, d.rows)
	rule.Prefetch = false
	out := []ops.DotShape{rule}
	add := func(sh ops.DotShape) {
		if d.rows%sh.Rows == 0 && !slices.Contains(out, sh) {
			out = append(out, sh)
		}
	}
	rows, threads, unrolls := []int{1, 2, 4}, []int{32, 64, 128}, []int{1, 2}
	if mode == tune.Full {
		for _, r := range rows {
			for _, th := range threads {
				for _, u := range unrolls {
					add(ops.DotShape{Rows: r, Threads: th, Unroll: u})
				}
			}
		}
		return out
	}
	for _, r := range rows {
		add(ops.DotShape{Rows: r, Threads: rule.Threads, Unroll: rule.Unroll})
	}
	for _, th := range threads {
		add(ops.DotShape{Rows: rule.Rows, Threads: th, Unroll: rule.Unroll})
	}
	for _, u := range unrolls {
		add(ops.DotShape{Rows: rule.Rows, Threads: rule.Threads, Unroll: u})
	}
	return out
}

// deviceKey names c's device and driver for the tuning cache.
func deviceKey(c *cuda.Context) string {
	v, _ := cuda.DriverVersion()
	return fmt.Sprintf("%s sm_%d%d %d SMs driver %d", c.Device.Name, c.Device.Major, c.Device.Minor, c.Device.Multiprocessors, v)
}

// tuneDots returns the shapes of p's decode mat-vecs that the cache holds
// and, for the others, measures them now on c and records them. On an
// error it returns the shapes it has so far with it.
func tuneDots(c *cuda.Context, p *plan, mode tune.Mode, cache *tune.Cache) (map[dotKey]ops.DotShape, error) {
	out := map[dotKey]ops.DotShape{}
	var todo []dotKey
	for _, d := range p.dots {
		if pr, ok := cache.Get(d.tuneShape()); ok && pr.Rows > 0 && pr.Threads > 0 && d.rows%pr.Rows == 0 {
			out[d] = ops.DotShape{Rows: pr.Rows, Threads: pr.Threads, Unroll: pr.Unroll}
			continue
		}
		todo = append(todo, d)
	}
	if len(todo) == 0 || mode == tune.Off {
		return out, nil
	}
	if c == nil {
		return out, fmt.Errorf("%d mat-vec shapes to measure and no device", len(todo))
	}
	t, err := newDotTimer(c)
	if err != nil {
		return nil, err
	}
	defer t.close()
	for _, d := range todo {
		if !fitsPool(d) { // an output head: its rule was measured (dotShape)
			continue
		}
		sh, err := t.best(d, dotCandidates(d, mode))
		if err != nil {
			return out, fmt.Errorf("tuning %s %s %d×%d: %w", d.form, d.t, d.rows, d.cols, err)
		}
		out[d] = sh
		cache.Put(d.tuneShape(), tune.Params{Rows: sh.Rows, Threads: sh.Threads, Unroll: sh.Unroll})
	}
	return out, nil
}

// dotPool is the bytes the timed matrices are read from, at a new offset
// each launch: a matrix read again from L2 (50 MB on the H200) would time
// the cache, not the stream from memory a decode step sees.
const dotPool = 256 << 20

// matrixBytes is the bytes of a row of mat-vec d's matrices and of each
// matrix rounded up to 256 (its slot in the pool), and how many it has
// (two for a SwiGLU).
func matrixBytes(d dotKey) (rowBytes, size uint64, mats int, err error) {
	rb, err := quant.RowBytes(d.t, int64(d.cols))
	if err != nil {
		return 0, 0, 0, err
	}
	mats = 1
	if d.form == "SwiGLU" {
		mats = 2
	}
	return uint64(rb), (uint64(d.rows)*uint64(rb) + 255) &^ 255, mats, nil
}

// fitsPool reports whether d's matrices fit the pool (an output head of
// 150 MB and more does not: it keeps its rule's shape).
func fitsPool(d dotKey) bool {
	_, size, mats, err := matrixBytes(d)
	return err == nil && uint64(mats)*size <= dotPool
}

// dotTimer times mat-vec launches on one device.
type dotTimer struct {
	c      *cuda.Context
	s      *cuda.Stream
	pool   cuda.Buffer
	e0, e1 *cuda.Event
}

func newDotTimer(c *cuda.Context) (*dotTimer, error) {
	t := &dotTimer{c: c}
	var err error
	if t.s, err = c.NewStream(); err != nil {
		return nil, err
	}
	if t.pool, err = c.Alloc(dotPool); err != nil {
		t.close()
		return nil, err
	}
	// random bytes with every half's exponent below the top (finite
	// scales: a NaN's arithmetic could time otherwise)
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 16<<20)
	for i := 0; i < len(b); i += 8 {
		v := r.Uint64() &^ 0x4000400040004000
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for off := 0; off < dotPool; off += len(b) {
		if err := t.pool.Slice(uint64(off), uint64(len(b))).Upload(b); err != nil {
			t.close()
			return nil, err
		}
	}
	if t.e0, err = c.NewEvent(); err != nil {
		t.close()
		return nil, err
	}
	if t.e1, err = c.NewEvent(); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func (t *dotTimer) close() {
	for _, e := range []*cuda.Event{t.e0, t.e1} {
		if e != nil {
			e.Destroy()
		}
	}
	if t.pool.Ptr != 0 {
		t.pool.Free()
	}
	if t.s != nil {
		t.s.Destroy()
	}
}

// best times each shape of mat-vec d (the first is the rule's) and returns
// the fastest, the first unless another beats it by tuneMargin.
func (t *dotTimer) best(d dotKey, shapes []ops.DotShape) (ops.DotShape, error) {
	tg := ptx.ForDevice(t.c.Device.Major, t.c.Device.Minor)
	ks := make([]*kernel.Kernel, len(shapes))
	for i, sh := range shapes {
		ks[i] = ops.DotMatVec(d.form, deviceLayout(d.t, d.cols), sh)
	}
	src, err := ptx.Module(ks, tg)
	if err != nil {
		return ops.DotShape{}, err
	}
	mod, err := t.c.LoadPTX(src)
	if err != nil {
		return ops.DotShape{}, err
	}
	defer mod.Unload()
	rowBytes, size, mats, err := matrixBytes(d)
	if err != nil {
		return ops.DotShape{}, err
	}
	if uint64(mats)*size > dotPool {
		return ops.DotShape{}, fmt.Errorf("a %d-byte matrix outgrows the %d-byte pool", size, dotPool)
	}
	slots := dotPool / (uint64(mats) * size)
	_, _, qk := dotQuantizer(d.t)
	// the activation's quants and scales, the residual and y: any values
	scratch, err := t.c.Alloc(uint64(d.cols) + 4*uint64(d.cols/qk) + 8*uint64(d.rows))
	if err != nil {
		return ops.DotShape{}, err
	}
	defer scratch.Free()
	if err := scratch.Zero(); err != nil {
		return ops.DotShape{}, err
	}
	xq, xd := scratch.Ptr, scratch.Ptr+uint64(d.cols)
	res := xd + 4*uint64(d.cols/qk)
	y := res + 4*uint64(d.rows)
	best, bestUs := 0, math.Inf(1)
	var first float64
	for i, k := range ks {
		fn, err := mod.Function(k.Name)
		if err != nil {
			return ops.DotShape{}, err
		}
		var vals []uint64
		var sizes []any
		for m := range mats {
			vals, sizes = append(vals, t.pool.Ptr+uint64(m)*size, uint64(d.rows)*rowBytes), append(sizes, ptx.Elems(d.rows*int(rowBytes)))
		}
		vals = append(vals, xq, uint64(d.cols), xd, uint64(d.cols/qk))
		sizes = append(sizes, ptx.Elems(d.cols), ptx.Elems(d.cols/qk))
		if d.form == "Add" || d.form == "Mul" {
			vals, sizes = append(vals, res, uint64(d.rows)), append(sizes, ptx.Elems(d.rows))
		}
		vals, sizes = append(vals, y, uint64(d.rows)), append(sizes, ptx.Elems(d.rows))
		a := cuda.NewArgs(len(vals))
		for j, v := range vals {
			a.Set(j, v)
		}
		grid, blk, shared, err := launchShape(k, tg, sizes...)
		if err != nil {
			return ops.DotShape{}, err
		}
		launch := func(slot uint64) error {
			for m := range mats {
				a.Set(2*m, t.pool.Ptr+(slot*uint64(mats)+uint64(m))*size)
			}
			return fn.Launch(grid, blk, shared, t.s, a)
		}
		const warm, reps = 3, 20
		for j := range warm {
			if err := launch(uint64(j) % slots); err != nil {
				return ops.DotShape{}, err
			}
		}
		if err := t.e0.Record(t.s); err != nil {
			return ops.DotShape{}, err
		}
		for j := range reps {
			if err := launch(uint64(warm+j) % slots); err != nil {
				return ops.DotShape{}, err
			}
		}
		if err := t.e1.Record(t.s); err != nil {
			return ops.DotShape{}, err
		}
		if err := t.e1.Synchronize(); err != nil {
			return ops.DotShape{}, err
		}
		ms, err := t.e1.Since(t.e0)
		if err != nil {
			return ops.DotShape{}, err
		}
		us := 1000 * float64(ms) / reps
		if i == 0 {
			first = us
		}
		if us < bestUs {
			best, bestUs = i, us
		}
	}
	if bestUs > first*(1-tuneMargin) {
		best = 0
	}
	return shapes[best], nil
}
