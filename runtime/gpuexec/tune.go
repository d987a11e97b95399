package gpuexec

import (
	"errors"
	"fmt"
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

// Prefill products are tuned the same way: each MatMulBlock product of the
// plan (activation rows, weight rows, columns) timed in every CTA block of
// prefillBlocks on random f16 operands, the rule's (prefillBlock: the
// largest block that still gives the H200's 132 SMs a CTA each) kept
// unless another is tuneMargin faster.

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

// tunePlan measures (or reads from cache) the shapes of p's decode
// mat-vecs and, on a device with tensor cores, of its prefill products in
// tg's rendering. On errors it returns the shapes it has with them.
func tunePlan(c *cuda.Context, p *plan, tg ptx.Target, mode tune.Mode, cache *tune.Cache) (tunings, error) {
	lt := &lazyTimer{c: c}
	defer lt.close()
	dots, derr := tuneDots(lt, p, mode, cache)
	blocks, berr := tuneBlocks(lt, p, tg, mode, cache)
	return tunings{dots: dots, blocks: blocks}, errors.Join(derr, berr)
}

// lazyTimer opens a dotTimer on its device on first need, for both tuners
// (its pool is filled once); nil or without a device, measuring fails.
type lazyTimer struct {
	c *cuda.Context
	t *dotTimer
}

// get is the timer, for n things of what to measure.
func (l *lazyTimer) get(n int, what string) (*dotTimer, error) {
	if l == nil || l.c == nil {
		return nil, fmt.Errorf("%d %s to measure and no device", n, what)
	}
	if l.t == nil {
		t, err := newDotTimer(l.c)
		if err != nil {
			return nil, err
		}
		l.t = t
	}
	return l.t, nil
}

func (l *lazyTimer) close() {
	if l != nil && l.t != nil {
		l.t.close()
	}
}

// tuneShape is the cache's key of product b rendered for tg (mma.sync or
// wgmma).
func (b blockKey) tuneShape(tg ptx.Target) tune.Shape {
	order := "MatMulBlockF16"
	if tg.WGMMA {
		order += "WGMMA"
	}
	return tune.Shape{Op: "prefill", Type: "F16", Order: order, ISA: "ptx", In: b.k, Out: b.n, Batch: b.rows}
}

// tunedBlock is the block shape of tuning parameters, ok where they name
// one of prefillBlocks.
func tunedBlock(pr tune.Params) (kernel.BlockShape, bool) {
	sh := kernel.BlockShape{WM: pr.WarpsM, WN: pr.WarpsN, M: pr.TilesM, N: pr.TilesN}
	return sh, slices.Contains(prefillBlocks, sh)
}

// blockCandidates are the blocks tried for product b: the rule's first,
// then the others of prefillBlocks.
func blockCandidates(b blockKey) []kernel.BlockShape {
	out := []kernel.BlockShape{prefillBlock(b.rows, b.n)}
	for _, sh := range prefillBlocks {
		if !slices.Contains(out, sh) {
			out = append(out, sh)
		}
	}
	return out
}

// blockBytes is the bytes product b's operands and output take: the f16
// activations and weights and the f32 output, each rounded up to 256.
func blockBytes(b blockKey) (x, w, y uint64) {
	up := func(n int) uint64 { return (uint64(n) + 255) &^ 255 }
	return up(2 * b.rows * b.k), up(2 * b.n * b.k), up(4 * b.rows * b.n)
}

// tuneBlocks returns the blocks of p's prefill products that the cache
// holds and, for the others, measures them now with lt (products whose
// operands outgrow the timer's pool keep the rule's).
func tuneBlocks(lt *lazyTimer, p *plan, tg ptx.Target, mode tune.Mode, cache *tune.Cache) (map[blockKey]kernel.BlockShape, error) {
	return tuneEach(lt, mode, "prefill products", p.products,
		func(b blockKey) (kernel.BlockShape, bool) {
			pr, ok := cache.Get(b.tuneShape(tg))
			sh, named := tunedBlock(pr)
			return sh, ok && named
		},
		func(b blockKey) bool { x, w, y := blockBytes(b); return x+w+y <= dotPool },
		func(t *dotTimer, b blockKey) (kernel.BlockShape, error) {
			sh, err := t.bestBlock(b, tg, blockCandidates(b))
			if err != nil {
				err = fmt.Errorf("tuning the prefill product %d×%d×%d: %w", b.rows, b.n, b.k, err)
			}
			return sh, err
		},
		func(b blockKey, sh kernel.BlockShape) {
			cache.Put(b.tuneShape(tg), tune.Params{WarpsM: sh.WM, WarpsN: sh.WN, TilesM: sh.M, TilesN: sh.N})
		})
}

// tuneEach is both tuners' walk: each of keys takes its cached shape, or,
// where it fits the timer's pool, one measured now with lt and recorded;
// the others keep their rule (absent from the map). On an error it
// returns the shapes it has so far with it.
func tuneEach[K comparable, S any](lt *lazyTimer, mode tune.Mode, what string, keys []K,
	cached func(K) (S, bool), fits func(K) bool, measure func(*dotTimer, K) (S, error), record func(K, S)) (map[K]S, error) {
	out := map[K]S{}
	var todo []K
	for _, k := range keys {
		if s, ok := cached(k); ok {
			out[k] = s
		} else if fits(k) {
			todo = append(todo, k)
		}
	}
	if len(todo) == 0 || mode == tune.Off {
		return out, nil
	}
	t, err := lt.get(len(todo), what)
	if err != nil {
		return out, err
	}
	for _, k := range todo {
		s, err := measure(t, k)
		if err != nil {
			return out, err
		}
		out[k] = s
		record(k, s)
	}
	return out, nil
}

// bestBlock times product b in each block of shapes (the first the
// rule's) on operands from the pool (random finite f16s) and returns the
// fastest, the first unless another beats it by tuneMargin.
func (t *dotTimer) bestBlock(b blockKey, tg ptx.Target, shapes []kernel.BlockShape) (kernel.BlockShape, error) {
	ks := make([]*kernel.Kernel, len(shapes))
	for i, sh := range shapes {
		ks[i] = ops.MatMulBlock(sh, kernel.U16)
	}
	src, err := ptx.Module(ks, tg)
	if err != nil {
		return kernel.BlockShape{}, err
	}
	mod, err := t.c.LoadPTX(src)
	if err != nil {
		return kernel.BlockShape{}, err
	}
	defer mod.Unload()
	xb, wb, _ := blockBytes(b)
	x, w, y := t.pool.Ptr, t.pool.Ptr+xb, t.pool.Ptr+xb+wb
	nx, nw, ny := b.rows*b.k, b.n*b.k, b.rows*b.n
	a := cuda.NewArgs(7)
	for i, v := range []uint64{x, uint64(nx), w, uint64(nw), y, uint64(ny), uint64(b.k)} {
		a.Set(i, v)
	}
	times := make([]float64, len(ks))
	for i, k := range ks {
		fn, err := mod.Function(k.Name)
		if err != nil {
			return kernel.BlockShape{}, err
		}
		grid, blk, shared, err := launchShape(k, tg, ptx.Elems(nx), ptx.Elems(nw), ptx.Elems(ny), b.k)
		if err != nil {
			return kernel.BlockShape{}, err
		}
		if err := allowShared(fn, int(shared)); err != nil {
			return kernel.BlockShape{}, err
		}
		if times[i], err = t.time(2, 5, func() error { return fn.Launch(grid, blk, shared, t.s, a) }); err != nil {
			return kernel.BlockShape{}, err
		}
	}
	return shapes[fastest(times)], nil
}

// time is run's mean device time in µs over reps runs after warm ones.
func (t *dotTimer) time(warm, reps int, run func() error) (float64, error) {
	for range warm {
		if err := run(); err != nil {
			return 0, err
		}
	}
	if err := t.e0.Record(t.s); err != nil {
		return 0, err
	}
	for range reps {
		if err := run(); err != nil {
			return 0, err
		}
	}
	if err := t.e1.Record(t.s); err != nil {
		return 0, err
	}
	if err := t.e1.Synchronize(); err != nil {
		return 0, err
	}
	ms, err := t.e1.Since(t.e0)
	if err != nil {
		return 0, err
	}
	return 1000 * float64(ms) / float64(reps), nil
}

// fastest is the index of the least of times, 0 (the rule's) unless
// another is tuneMargin less.
func fastest(times []float64) int {
	best := 0
	for i, us := range times {
		if us < times[best] {
			best = i
		}
	}
	if times[best] > times[0]*(1-tuneMargin) {
		return 0
	}
	return best
}

// tuneDots returns the shapes of p's decode mat-vecs that the cache holds
// and, for the others, measures them now with lt and records them (output
// heads that outgrow the timer's pool keep their rule, measured in
// dotShape). On an error it returns the shapes it has so far with it.
func tuneDots(lt *lazyTimer, p *plan, mode tune.Mode, cache *tune.Cache) (map[dotKey]ops.DotShape, error) {
	return tuneEach(lt, mode, "mat-vec shapes", p.dots,
		func(d dotKey) (ops.DotShape, bool) {
			pr, ok := cache.Get(d.tuneShape())
			return ops.DotShape{Rows: pr.Rows, Threads: pr.Threads, Unroll: pr.Unroll}, ok && pr.Rows > 0 && pr.Threads > 0 && d.rows%pr.Rows == 0
		},
		fitsPool,
		func(t *dotTimer, d dotKey) (ops.DotShape, error) {
			sh, err := t.best(d, dotCandidates(d, mode))
			if err != nil {
				err = fmt.Errorf("tuning %s %s %d×%d: %w", d.form, d.t, d.rows, d.cols, err)
			}
			return sh, err
		},
		func(d dotKey, sh ops.DotShape) {
			cache.Put(d.tuneShape(), tune.Params{Rows: sh.Rows, Threads: sh.Threads, Unroll: sh.Unroll})
		})
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
	times := make([]float64, len(ks))
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
		slot := uint64(0)
		if times[i], err = t.time(3, 20, func() error { slot++; return launch(slot % slots) }); err != nil {
			return ops.DotShape{}, err
		}
	}
	return shapes[fastest(times)], nil
}
