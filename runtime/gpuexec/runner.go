package gpuexec

import (
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/runtime/cuda"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/sample"
	"github.com/jitllm/jitllm/runtime/tune"
)

// Runner holds one sequence's state on the GPU (KV caches, position) and the
// planned launches of the graph. Its API mirrors exec.Runner.
type Runner struct {
	m   *exec.Model
	opt exec.Options
	p   *plan

	c       *cuda.Context
	s       *cuda.Stream
	sh      *shared // the module and constant allocations, with the runners that Share them
	bufs    []cuda.Buffer
	calls   []call   // a one-row step
	lcalls  [][]call // the long steps (plan.longs)
	pcalls  []call   // a prefill step
	vcalls  [][]call // the verify steps (plan.verify)
	graph   *cuda.Graph
	lgraphs []*cuda.Graph // lcalls captured
	vgraphs []*cuda.Graph // vcalls captured
	noGraph bool          // plain launches (SetGraphs(false), or capture failed)
	capErr  error         // why capture failed, if it did
	fork    *fork         // the second stream of the one-row steps' side launches (nil: none)

	pos      int
	stepHost []byte // the step bytes, in pinned
	pinned   []*cuda.HostBuffer
	hostLog  []float32 // a verify step's logits (else one row's), page-locked: the download's target
	logits   []float32 // the last row's logits (all rows' with LogitsAll)
	rowLog   []float32 // ForwardRows' logits
	stage    *stageIO  // a stage's page-locked rows in and out (stage.go)

	// ForwardGreedy: the argmax of the one-row and the prefill step's
	// logits into a 4-byte device buffer, and its page-locked copy
	argmax  [2]*call
	amBuf   int  // the result's index in bufs
	greedy  bool // the step in flight ends with the argmax, not the logits
	hostTok []int32
}

// call is one planned launch bound to device memory.
type call struct {
	fn          *cuda.Function
	grid, block cuda.Dim3
	shared      uint32 // dynamic shared memory bytes (ptx.Launch.Shared and Stages)
	args        *cuda.Args
	dependent   bool // launched for programmatic dependent launch (dependentLaunch)
	resident    bool // every CTA resident at once (a phased kernel: cuda.Function.LaunchResident)
	side        bool // on the runner's second stream (launch.side)
}

// threadsPerBlock is the CTA size of every grid kernel (launch shape never
// changes a result, docs/ptx.md).
const threadsPerBlock = 128

// NewRunner plans m's graph on CUDA device opt.Device (0 first): the kernels are rendered to
// PTX for the device's compute capability and loaded as one module, the
// weights the kernels read are uploaded once in their stored layout and the
// KV caches allocated for opt.Context positions (0: the model's trained
// context, capped at 4096). opt.Threads and opt.MaxBatch do not apply: a
// prompt runs in steps of prefillRows(context) rows, 2 to 9 tokens in a
// verify step (one token a step with opt.LogitsAll), decoding one token a
// step. With opt.Tune the decode
// mat-vecs take the shapes measured on this device (tune.go; cached in
// opt.TuneDir). Without a driver the error wraps cuda.ErrNoDriver.
func NewRunner(m *exec.Model, opt exec.Options) (*Runner, error) {
	if opt.Context <= 0 {
		opt.Context = m.ContextLength()
		if opt.Context <= 0 || opt.Context > 4096 {
			opt.Context = 4096
		}
	}
	rows := prefillRows(opt.Context)
	if opt.LogitsAll { // every row's logits: token by token
		rows = 1
	}
	if err := cuda.Load(); err != nil {
		return nil, fmt.Errorf("gpuexec: %w", err)
	}
	c, err := cuda.Open(opt.Device)
	if err != nil {
		return nil, fmt.Errorf("gpuexec: %w", err)
	}
	tiles := c.Device.Major >= 8
	p, err := newPlanTiles(m, opt.Context, rows, tiles, 0)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("gpuexec: %w", err)
	}
	var tuned tunings
	if opt.Tune != tune.Off { // the decode mat-vecs' and prefill products' shapes measured on this device (tune.go)
		var cache *tune.Cache
		if opt.TuneDir != "" {
			cache = tune.AtDevice(opt.TuneDir, deviceKey(c))
		} else {
			cache = tune.DefaultDevice(deviceKey(c))
		}
		if tuned, err = tunePlan(c, p, deviceTarget(c), opt.Tune, cache); err != nil {
			// the rules' shapes serve wherever a measurement failed (a
			// device short of memory for the pool, say): tuning only speeds
			tune.Warnf("CUDA kernel shapes: %v; the rest keep the default shapes", err)
		}
		if len(tuned.dots)+len(tuned.blocks) > 0 { // else the plan is the one at hand
			if p, err = newPlanTuned(m, opt.Context, rows, tiles, 0, tuned); err != nil {
				c.Close()
				return nil, fmt.Errorf("gpuexec: %w", err)
			}
		}
	}
	if tiles && rows > 1 { // prefill products on the tensor cores: keep their f16 weights if there is room
		if budget := residentF16Budget(c, p); budget > 0 {
			if p, err = newPlanTuned(m, opt.Context, rows, tiles, budget, tuned); err != nil {
				c.Close()
				return nil, fmt.Errorf("gpuexec: %w", err)
			}
		}
	}
	if limit, on := phaseLimit(); on && cuda.CanLaunchDependent() {
		// phased one-row steps (phases.go); resident launches go through cuLaunchKernelEx
		if err := p.phase(deviceTarget(c), limit); err != nil {
			c.Close()
			return nil, fmt.Errorf("gpuexec: %w", err)
		}
	}
	p.warm(warmBytes(), warmEvery()) // after the phases: its side launches would cut their runs
	r := &Runner{m: m, opt: opt, p: p, c: c}
	if err := r.bind(); err != nil {
		r.Close()
		return nil, fmt.Errorf("gpuexec: %w", err)
	}
	return r, nil
}

// residentF16Reserve is the device memory left free beside the plan and
// its resident f16 weights: room for other runners, the driver's growth
// and other processes.
const residentF16Reserve = 4 << 30

// residentF16Budget is the bytes of resident f16 prefill weights the device
// has room for beside plan p: half of what is free after p's allocations,
// the driver's overhead and residentF16Reserve.
func residentF16Budget(c *cuda.Context, p *plan) int64 {
	free, _, err := c.MemInfo()
	if err != nil {
		return 0
	}
	need := int64(DeviceOverhead + residentF16Reserve)
	for _, a := range p.allocs {
		need += allocSize(a)
	}
	return max(int64(free)-need, 0) / 2
}

// render is the PTX module of p's kernels and the device argmax for
// target tg, as bind loads it: with dependent (dependentLaunch: sm_90 and
// a driver that launches so), the decode step's kernels rendered for
// dependent launches (the returned target says which).
func render(p *plan, tg ptx.Target, dependent bool) (src string, ks []*kernel.Kernel, _ ptx.Target, am *kernel.Kernel, err error) {
	am = ops.ArgMaxCTA()
	if dependent {
		// the one-row step's kernels: a prefill step's run long enough
		// that an early launch only takes the GPU's room, and rendered
		// with the waits they ran 9% slower even launched as usual (H200)
		decode := map[*kernel.Kernel]bool{am: true}
		for _, ls := range p.oneRowSteps() {
			for _, l := range *ls {
				if !l.side { // a side launch waits for nothing on its stream (warm.go)
					decode[l.k] = true
				}
			}
		}
		tg.Dependent = func(k *kernel.Kernel) bool { return decode[k] }
		tg.LaunchEarly = launchEarly(p)
	}
	tg.MinCTAs = matVecCTAs(os.Getenv("JITLLM_MATVEC_CTAS"))
	ks = append(p.kernelList(), am)
	src, err = ptx.Module(ks, tg)
	return src, ks, tg, am, err
}

// matVecCTAs is JITLLM_MATVEC_CTAS ("n" or "n:part"): the mat-vecs (those
// whose names hold part, where given) rendered to fit n CTAs a
// multiprocessor (ptx.Target.MinCTAs), a register budget; nil where unset.
// The split q·k·v launch of the 8B takes 88 registers, 5 CTAs a
// multiprocessor, and its 768 CTAs 1.16 waves of the H200 (docs/perf, stop 37).
func matVecCTAs(v string) func(*kernel.Kernel) int {
	num, part, _ := strings.Cut(v, ":")
	n, err := strconv.Atoi(num)
	if err != nil || n < 2 {
		return nil
	}
	return func(k *kernel.Kernel) int {
		if strings.HasPrefix(k.Name, "MatVecDot") && strings.Contains(k.Name, part) {
			return n
		}
		return 0
	}
}

// shared is what the runners of one plan on one device hold in common
// (Runner.Share): the loaded module and its functions, and the constant
// allocations (weights, their resident f16 copies, norms' vectors, RoPE
// frequencies: bufs at their plan indices, zero elsewhere), freed when the
// last runner closes.
type shared struct {
	mu   sync.Mutex
	refs int
	mod  *cuda.Module
	ks   []*kernel.Kernel // the module's entries in order (a trace record's Entry)
	fns  map[*kernel.Kernel]*cuda.Function
	tg   ptx.Target
	am   *kernel.Kernel
	bufs []cuda.Buffer
}

// constant reports whether allocation a holds the same bytes in every
// runner of the plan once bound: uploaded from the model, or written by the
// setup launches (the resident f16 weights) and only read after.
func (a alloc) constant() bool { return a.init != nil || a.parts != nil || a.resident }

// loadShared renders and loads p's kernels and uploads its constant
// allocations on c (running the setup launches): the first runner's share.
func loadShared(c *cuda.Context, p *plan) (sh *shared, err error) {
	tg := deviceTarget(c)
	src, ks, tg, am, err := render(p, tg, dependentLaunch(tg))
	if err != nil {
		return nil, err
	}
	sh = &shared{refs: 1, fns: map[*kernel.Kernel]*cuda.Function{}, bufs: make([]cuda.Buffer, len(p.allocs))}
	defer func() {
		if err != nil {
			sh.release()
		}
	}()
	if sh.mod, err = c.LoadPTX(src); err != nil && tg.WGMMA {
		// a driver that does not take sm_90a's PTX: the products on mma.sync
		tg.WGMMA, tg.WGMMAOverlap = false, false
		if src, ks, tg, am, err = render(p, tg, dependentLaunch(tg)); err != nil {
			return sh, err
		}
		sh.mod, err = c.LoadPTX(src)
	}
	if err != nil {
		return sh, err
	}
	sh.tg, sh.am, sh.ks = tg, am, ks
	carve := carveout()
	for _, k := range ks {
		if sh.fns[k], err = sh.mod.Function(k.Name); err != nil {
			return sh, err
		}
		lp, err := ptx.Plan(k, tg)
		if err != nil {
			return sh, fmt.Errorf("%s: %w", k.Name, err)
		}
		if err := allowShared(sh.fns[k], lp.Shared+lp.Stages); err != nil {
			return sh, fmt.Errorf("%s: %d bytes of shared memory a CTA: %w", k.Name, lp.Shared+lp.Stages, err)
		}
		if carve >= 0 {
			if err := sh.fns[k].SetCarveout(carve); err != nil {
				return sh, err
			}
		}
	}
	for i, a := range p.allocs {
		if !a.constant() {
			continue
		}
		b, err := c.Alloc(uint64(allocSize(a)))
		if err != nil {
			return sh, fmt.Errorf("%s: %w", a.name, err)
		}
		sh.bufs[i] = b
		if err := b.Zero(); err != nil {
			return sh, err
		}
		if err := a.initBytes(func(off int, src []byte) error { return b.Slice(uint64(off), uint64(len(src))).Upload(src) }); err != nil {
			return sh, fmt.Errorf("%s: %w", a.name, err)
		}
	}
	return sh, nil
}

// release drops a runner's hold; the last frees the constant allocations
// and unloads the module.
func (sh *shared) release() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.refs--; sh.refs > 0 {
		return
	}
	for _, b := range sh.bufs {
		if b.Ptr != 0 {
			b.Free()
		}
	}
	if sh.mod != nil {
		sh.mod.Unload()
	}
	sh.mod, sh.fns, sh.bufs = nil, nil, nil
}

// Share returns a runner of r's model and options on r's device that shares
// r's weights and kernels (nothing uploaded again: device memory for its own
// KV cache and activations only) and runs a sequence of its own, as a
// server's sessions do. Either may close first; the weights go with the last.
// Runners on one device are used from one goroutine each.
func (r *Runner) Share() (*Runner, error) {
	if r.sh == nil {
		return nil, fmt.Errorf("gpuexec: share of a closed runner")
	}
	c, err := cuda.Open(r.opt.Device)
	if err != nil {
		return nil, fmt.Errorf("gpuexec: %w", err)
	}
	r.sh.mu.Lock()
	r.sh.refs++
	r.sh.mu.Unlock()
	o := &Runner{m: r.m, opt: r.opt, p: r.p, c: c, sh: r.sh}
	if err := o.bindOwn(false); err != nil {
		o.Close()
		return nil, fmt.Errorf("gpuexec: %w", err)
	}
	return o, nil
}

// bind loads the plan's share (the first runner) and binds the runner's
// own allocations and calls.
func (r *Runner) bind() error {
	sh, err := loadShared(r.c, r.p)
	if err != nil {
		return err
	}
	r.sh = sh
	return r.bindOwn(true)
}

// bindOwn allocates the runner's own (non-constant) allocations, binds its
// calls to them and the share's, and makes its stream and page-locked
// buffers; with setup it first runs the plan's setup launches (once a
// share).
func (r *Runner) bindOwn(setup bool) error {
	p, tg, fns, am := r.p, r.sh.tg, r.sh.fns, r.sh.am
	for i, a := range p.allocs {
		if a.constant() {
			r.bufs = append(r.bufs, r.sh.bufs[i])
			continue
		}
		b, err := r.c.Alloc(uint64(allocSize(a)))
		if err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		r.bufs = append(r.bufs, b)
		if err := b.Zero(); err != nil {
			return err
		}
	}
	if setup {
		calls, err := r.bindCalls(p.setup, tg, fns, false)
		if err != nil {
			return err
		}
		if err := launchCalls(calls, nil, nil); err != nil {
			return err
		}
		if err := r.c.Synchronize(); err != nil {
			return fmt.Errorf("decoding the resident f16 weights: %w", err)
		}
	}
	var err error
	if r.calls, err = r.bindCalls(p.launches, tg, fns, true); err != nil {
		return err
	}
	r.lcalls, r.lgraphs = make([][]call, len(p.longs)), make([]*cuda.Graph, len(p.longs))
	for t, ls := range p.longs {
		if r.lcalls[t], err = r.bindCalls(ls.launches, tg, fns, true); err != nil {
			return err
		}
	}
	// prefill kernels run long and fill the GPU: launched early they only
	// take its room (1B pp512 60836 -> 44872 tok/s on the H200), so they
	// launch as usual (the waits of those a decode step shares return at once)
	if r.pcalls, err = r.bindCalls(p.prefill, tg, fns, false); err != nil {
		return err
	}
	r.vcalls, r.vgraphs = make([][]call, len(p.verify)), make([]*cuda.Graph, len(p.verify))
	for i, v := range p.verify {
		if r.vcalls[i], err = r.bindCalls(v.launches, tg, fns, false); err != nil {
			return err
		}
	}
	if r.s, err = r.c.NewStream(); err != nil {
		return err
	}
	if r.fork, err = newFork(r.c, append([][]call{r.calls}, r.lcalls...)...); err != nil {
		return err
	}
	rows := 1
	if r.opt.LogitsAll {
		rows = r.opt.Context
	}
	// Page-locked step bytes and logits: a copy from or to pageable
	// memory is staged by the driver through its own pinned buffer, a
	// second host copy and a slower DMA on every token.
	sh, err := r.c.AllocHost(uint64(4 * (2 + p.rows)))
	if err != nil {
		return err
	}
	r.pinned = append(r.pinned, sh)
	r.stepHost = sh.Bytes()
	lh, err := r.c.AllocHost(uint64(4 * p.vocab * max(1, p.vrows())))
	if err != nil {
		return err
	}
	r.pinned = append(r.pinned, lh)
	r.hostLog = unsafe.Slice((*float32)(unsafe.Pointer(&lh.Bytes()[0])), p.vocab*max(1, p.vrows()))
	if rows == 1 {
		r.logits = r.hostLog[:p.vocab] // no copy: Forward returns the pinned row
	} else {
		r.logits = make([]float32, rows*p.vocab)
	}
	// the device argmax for ForwardGreedy: its result buffer sits past the
	// plan's allocations
	tb, err := r.c.Alloc(4)
	if err != nil {
		return err
	}
	r.amBuf = len(r.bufs)
	r.bufs = append(r.bufs, tb)
	th, err := r.c.AllocHost(4)
	if err != nil {
		return err
	}
	r.pinned = append(r.pinned, th)
	r.hostTok = unsafe.Slice((*int32)(unsafe.Pointer(&th.Bytes()[0])), 1)
	res := view{r.amBuf, 0, 1}
	for i, lv := range []view{p.logits, p.plogits} {
		if lv.n == 0 {
			continue
		}
		cs, err := r.bindCalls([]launch{{k: am, args: []any{lv, res}}}, tg, fns, true)
		if err != nil {
			return err
		}
		r.argmax[i] = &cs[0]
	}
	return nil
}

// bindCalls binds planned launches to device memory and launch shapes;
// with dependent, those of tg.Dependent's kernels launch as dependent
// launches (a one-row step's and its argmax).
func (r *Runner) bindCalls(ls []launch, tg ptx.Target, fns map[*kernel.Kernel]*cuda.Function, dependent bool) ([]call, error) {
	var calls []call
	for _, l := range ls {
		a := cuda.NewArgs(2 * len(l.args))
		targs := make([]any, len(l.args))
		slot := 0
		for i, prm := range l.k.Params {
			switch v := l.args[i].(type) {
			case view:
				if prm.Buf.Elem == kernel.U8 && v.off%16 != 0 {
					// the ABI's promise the PTX's 16-byte loads rely on
					return nil, fmt.Errorf("%s: byte buffer %s at offset %d, not 16-byte aligned", l.k.Name, prm.Buf.Name, v.off)
				}
				a.Set(slot, r.bufs[v.a].Ptr+uint64(v.off*prm.Buf.Elem.Bytes()))
				a.Set(slot+1, uint64(v.n))
				slot += 2
				targs[i] = ptx.Elems(v.n)
			case int:
				a.Set(slot, uint64(int64(v)))
				slot++
				targs[i] = v
			case float32:
				a.SetF32(slot, v)
				slot++
				targs[i] = v
			default:
				return nil, fmt.Errorf("%s: argument %d of type %T", l.k.Name, i, v)
			}
		}
		grid, block, shared, err := launchShape(l.k, tg, targs...)
		if err != nil {
			return nil, err
		}
		resident := len(l.k.Phases) > 0 && l.k.Local == nil && l.k.Epilogue == nil // CTA-local phases, block epilogues take any grid
		if !resident && stageGrid() && staged(l.k) {
			// a staged mat-vec's grid at the CTAs resident at once, each
			// walking its groups (with JITLLM_STAGE_AHEAD, copying ahead)
			if grid.X, err = residentGrid(fns[l.k], r.c.Device.Multiprocessors, grid.X, block.X, shared); err != nil {
				return nil, fmt.Errorf("%s: %w", l.k.Name, err)
			}
			if n := stageGridPerSM(); n > 0 {
				grid.X = min(grid.X, uint32(n*r.c.Device.Multiprocessors))
			}
		}
		if resident {
			want := grid.X
			if grid.X, err = residentGrid(fns[l.k], r.c.Device.Multiprocessors, grid.X, block.X, shared); err != nil {
				return nil, fmt.Errorf("%s: %w", l.k.Name, err)
			}
			if os.Getenv("JITLLM_PHASES_LOG") != "" {
				fmt.Fprintf(os.Stderr, "phased %s: %d CTAs of %d (%d wanted)\n", l.k.Doc, grid.X, block.X, want)
			}
		}
		calls = append(calls, call{fns[l.k], grid, block, shared, a, dependent && !l.side && tg.Dependent != nil && tg.Dependent(l.k), resident, l.side})
	}
	return calls, nil
}

// launchShape is the grid, CTA and dynamic shared memory of a launch of k
// over sizes (kernel.Run's arguments, ptx.Elems for buffers): ptx.Threads
// threads in CTAs of threadsPerBlock, or of the group where it is wider.
func launchShape(k *kernel.Kernel, tg ptx.Target, sizes ...any) (grid, block cuda.Dim3, shared uint32, err error) {
	n, err := ptx.Threads(k, tg, sizes...)
	if err != nil {
		return grid, block, 0, fmt.Errorf("%s: %w", k.Name, err)
	}
	lp, err := ptx.Plan(k, tg)
	if err != nil {
		return grid, block, 0, fmt.Errorf("%s: %w", k.Name, err)
	}
	// n is a multiple of the group, and so is the block: a group of up
	// to 32 never straddles a warp, and a wider one is the whole CTA
	b := lp.CTA(max(n, 1), threadsPerBlock)
	return cuda.Dim3{X: uint32((max(n, 1) + b - 1) / b), Y: 1, Z: 1}, cuda.Dim3{X: uint32(b), Y: 1, Z: 1}, uint32(lp.Shared + lp.Stages), nil
}

// launch enqueues c on s.
func (c *call) launch(s *cuda.Stream) error {
	if c.resident && cooperative {
		return c.fn.LaunchResident(c.grid, c.block, c.shared, s, c.args, c.dependent)
	}
	if c.dependent {
		return c.fn.LaunchDependent(c.grid, c.block, c.shared, s, c.args)
	}
	return c.fn.Launch(c.grid, c.block, c.shared, s, c.args)
}

// dependentLaunch reports whether the runner renders and launches its
// kernels for programmatic dependent launch (ptx.Target.Dependent): on
// sm_90 and later where the driver has cuLaunchKernelEx, unless
// JITLLM_DEPENDENT_LAUNCH=0.
func dependentLaunch(tg ptx.Target) bool {
	return tg.SM >= 90 && cuda.CanLaunchDependent() && os.Getenv("JITLLM_DEPENDENT_LAUNCH") != "0"
}

// deviceTarget is the PTX target the runner renders for c's device.
func deviceTarget(c *cuda.Context) ptx.Target {
	tg := ptx.ForDevice(c.Device.Major, c.Device.Minor)
	tg.WGMMA, tg.WGMMAOverlap = useWGMMA(tg)
	tg.PhaseCTAs, tg.PhaseBarrier = phaseCTAs(), phaseBarrier()
	tg.LocalWarps = max(envInt("JITLLM_LOCAL_WARPS", 0), 0) // 0.75 of the default on the H100 (docs/perf, stop 38)
	tg.StageOnce = os.Getenv("JITLLM_STAGE_ONCE") == "1"
	tg.StageAhead = stageAhead()
	tg.Trace = os.Getenv("JITLLM_TRACE") == "1"
	return tg
}

// useWGMMA says whether the prefill products run on sm_90a's warpgroup
// MMA (ptx.Target.WGMMA) and with a stage's products in flight
// (WGMMAOverlap): on sm_90 with JITLLM_WGMMA=1 (=2: overlapped), until it
// has been checked and timed on a device (it assembles; docs/gpu.md).
func useWGMMA(tg ptx.Target) (wgmma, overlap bool) {
	v := os.Getenv("JITLLM_WGMMA")
	return tg.SM == 90 && (v == "1" || v == "2"), v == "2"
}

// allowShared lets fn launch with n bytes of dynamic shared memory (bind
// does it as it loads each function). A function may use 48 KiB less its
// static shared memory unless allowed more, so any n is allowed
// explicitly: wgmma's 64×128 block takes exactly 48 KiB of stages beside
// a static reduction buffer, and failed to launch on an H100 without.
func allowShared(fn *cuda.Function, n int) error {
	if n == 0 {
		return nil
	}
	return fn.SetMaxDynamicShared(n)
}

// Close frees the runner's device memory, graphs and stream, and the
// weights and module where no runner that shares them is left.
func (r *Runner) Close() {
	for _, g := range append(append([]*cuda.Graph{r.graph}, r.lgraphs...), r.vgraphs...) {
		if g != nil {
			g.Destroy()
		}
	}
	for i, b := range r.bufs {
		if i >= len(r.p.allocs) || !r.p.allocs[i].constant() {
			b.Free()
		}
	}
	for _, h := range r.pinned {
		h.Free()
	}
	if r.stage != nil {
		for _, b := range r.stage.links {
			b.Free()
		}
	}
	if r.sh != nil {
		r.sh.release()
	}
	if r.s != nil {
		r.s.Destroy()
	}
	r.fork.destroy()
	if r.c != nil {
		r.c.Close()
	}
	*r = Runner{}
}

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

// SetGraphs turns the replay of a captured CUDA graph on (the default) or
// off (plain launches, one per kernel, every step).
func (r *Runner) SetGraphs(on bool) {
	r.noGraph = !on
	if !on && r.graph != nil {
		r.graph.Destroy()
		r.graph = nil
	}
	for _, gs := range [][]*cuda.Graph{r.lgraphs, r.vgraphs} {
		for i, g := range gs {
			if !on && g != nil {
				g.Destroy()
				gs[i] = nil
			}
		}
	}
}

// Graphs reports whether steps replay a captured graph, and why not when a
// capture failed.
func (r *Runner) Graphs() (bool, error) { return !r.noGraph && r.graph != nil, r.capErr }

// Forward feeds tokens at the next positions and returns the logits of the
// last one (of every token with LogitsAll). The slice is the runner's own
// and changes on the next call.
func (r *Runner) Forward(tokens []int32) ([]float32, error) {
	if err := r.checkTokens(tokens); err != nil {
		return nil, err
	}
	v := r.p.vocab
	if !r.opt.LogitsAll && len(tokens) > 1 && len(tokens) <= r.p.vrows() {
		// a few tokens (a chat's next turn): one verify step reads the
		// weights once where a prefill step runs all its rows
		n := len(tokens)
		if err := r.verifyStep(tokens, r.hostLog[:n*v]); err != nil {
			return nil, err
		}
		r.pos += n
		last := r.hostLog[(n-1)*v : n*v]
		if r.greedy {
			r.hostTok[0] = sample.Argmax(last)
		}
		copy(r.logits[:v], last)
		return r.logits[:v], nil
	}
	if !r.opt.LogitsAll && r.p.rows > 1 && len(tokens) > 1 {
		// chunks of up to rows rows a step, the last padded
		for len(tokens) > 0 {
			n := min(len(tokens), r.p.rows)
			if err := r.prefillStep(tokens[:n], r.logits[:v], n == len(tokens)); err != nil {
				return nil, err
			}
			r.pos += n
			tokens = tokens[n:]
		}
		return r.logits[:v], nil
	}
	for i, t := range tokens {
		row := 0
		if r.opt.LogitsAll {
			row = i
		}
		keep := r.opt.LogitsAll || i == len(tokens)-1
		if err := r.step(t, r.logits[row*v:(row+1)*v], keep); err != nil {
			return nil, err
		}
		r.pos++
	}
	if r.opt.LogitsAll {
		return r.logits[:len(tokens)*v], nil
	}
	return r.logits[:v], nil
}

// checkTokens refuses tokens that Forward and ForwardRows cannot run at
// the runner's position.
func (r *Runner) checkTokens(tokens []int32) error {
	if len(tokens) == 0 {
		return fmt.Errorf("forward: no tokens")
	}
	if r.pos+len(tokens) > r.opt.Context {
		return fmt.Errorf("%d tokens at position %d exceed the context of %d positions", len(tokens), r.pos, r.opt.Context)
	}
	for _, t := range tokens {
		if t < 0 || int(t) >= r.p.embRows {
			return fmt.Errorf("token id %d is outside the vocabulary of %d", t, r.p.embRows)
		}
	}
	return nil
}

// ForwardRows feeds tokens at the next positions and returns every row's
// logits, row after row: what speculative decoding checks its drafted
// tokens against (runtime/generate). A step of up to plan.vrows rows
// (the token chosen and 8 drafted) reads the weights once for all of them;
// more tokens take more steps, and a runner without a verify step
// (LogitsAll, a context of one) runs them one-row step by step. The slice
// is the runner's own and changes on the next call.
func (r *Runner) ForwardRows(tokens []int32) ([]float32, error) {
	if err := r.checkTokens(tokens); err != nil {
		return nil, err
	}
	v, most := r.p.vocab, r.p.vrows()
	if need := len(tokens) * v; cap(r.rowLog) < need {
		r.rowLog = make([]float32, need)
	}
	out := r.rowLog[:len(tokens)*v]
	for off := 0; off < len(tokens); {
		n := min(len(tokens)-off, max(most, 1))
		var err error
		if most == 0 || n == 1 {
			err = r.step(tokens[off], out[off*v:(off+1)*v], true)
		} else {
			err = r.verifyStep(tokens[off:off+n], out[off*v:(off+n)*v])
		}
		if err != nil {
			return nil, err
		}
		r.pos += n
		off += n
	}
	return out, nil
}

// verifyStep runs toks (2 to plan.vrows of them) at r.pos as the smallest
// verify step that holds them, its rows past them padded with token 0
// (cache rows past the sequence, as a prefill step's), replaying its
// captured graph, and downloads the real rows' logits into out.
func (r *Runner) verifyStep(toks []int32, out []float32) error {
	i := r.p.verifyFor(len(toks))
	if i < 0 {
		return fmt.Errorf("no verify step of %d rows", len(toks))
	}
	vs := &r.p.verify[i]
	h := r.stepHost
	binary.LittleEndian.PutUint32(h[0:], uint32(len(toks)-1))
	binary.LittleEndian.PutUint32(h[4:], uint32(r.pos))
	for j := 0; j < vs.rows; j++ {
		t := int32(0)
		if j < len(toks) {
			t = toks[j]
		}
		binary.LittleEndian.PutUint32(h[8+4*j:], uint32(t))
	}
	if err := r.bufs[r.p.step].UploadAsync(h[:8+4*vs.rows], r.s); err != nil {
		return err
	}
	if err := r.replay(r.vcalls[i], &r.vgraphs[i]); err != nil {
		return err
	}
	v := vs.logits
	return r.finish(view{v.a, v.off, len(toks) * r.p.vocab}, out, true)
}

// Greedy reports whether ForwardGreedy serves this runner: not with
// LogitsAll, nor for a stage that ends in hidden rows.
func (r *Runner) Greedy() bool { return !r.opt.LogitsAll && !r.p.hidden }

// ForwardGreedy is Forward returning the argmax of the last token's
// logits (the first index of the largest, as greedy sampling takes it),
// computed on the device: the step returns 4 bytes instead of the
// vocabulary's logits. Not with LogitsAll.
func (r *Runner) ForwardGreedy(tokens []int32) (int32, error) {
	if !r.Greedy() {
		return 0, fmt.Errorf("forward greedy: the runner keeps every row's logits (LogitsAll) or ends in hidden rows")
	}
	r.greedy = true
	defer func() { r.greedy = false }()
	if _, err := r.Forward(tokens); err != nil {
		return 0, err
	}
	return r.hostTok[0], nil
}

// step runs one token at r.pos; with keep it downloads the logits into out.
func (r *Runner) step(tok int32, out []float32, keep bool) error {
	binary.LittleEndian.PutUint32(r.stepHost[0:], 0)
	binary.LittleEndian.PutUint32(r.stepHost[4:], uint32(r.pos))
	binary.LittleEndian.PutUint32(r.stepHost[8:], uint32(tok))
	// the step's bytes and the logits travel in stream order, so the
	// step's kernels see the one and the copy of the other waits for them
	if err := r.bufs[r.p.step].UploadAsync(r.stepHost[:12], r.s); err != nil {
		return err
	}
	if err := r.enqueue(); err != nil {
		return err
	}
	return r.finish(r.p.logits, out, keep)
}

// finish waits for the step; with keep it first downloads the logits
// (view v, from the start of its allocation) into the page-locked row and
// copies them to out unless out is that row.
func (r *Runner) finish(v view, out []float32, keep bool) error {
	// the device argmax is of the one-row and prefill steps' logits; a
	// verify step's come back whole (Forward takes the last row's)
	if keep && r.greedy && (v == r.p.logits || v == r.p.plogits) {
		c := r.argmax[0]
		if v != r.p.logits {
			c = r.argmax[1]
		}
		if c == nil {
			return fmt.Errorf("no device argmax for this step")
		}
		if err := c.launch(r.s); err != nil {
			return err
		}
		b := unsafe.Slice((*byte)(unsafe.Pointer(&r.hostTok[0])), 4)
		if err := r.bufs[r.amBuf].DownloadAsync(b, r.s); err != nil {
			return err
		}
		return r.s.Synchronize()
	}
	if keep {
		b := unsafe.Slice((*byte)(unsafe.Pointer(&r.hostLog[0])), 4*len(r.hostLog))
		if err := r.bufs[v.a].DownloadAsync(b[:4*v.n], r.s); err != nil {
			return err
		}
	}
	if err := r.s.Synchronize(); err != nil {
		return err
	}
	if keep && &out[0] != &r.hostLog[0] {
		copy(out, r.hostLog[:v.n])
	}
	return nil
}

// prefillStep runs the rows of toks (at most p.rows) at r.pos as one step,
// the rest of the step's rows padded with token 0: their cache rows lie
// past the sequence, where later steps overwrite them before any reads
// them. With keep it downloads the last row's logits into out.
func (r *Runner) prefillStep(toks []int32, out []float32, keep bool) error {
	h := r.stepHost
	binary.LittleEndian.PutUint32(h[0:], uint32(len(toks)-1))
	binary.LittleEndian.PutUint32(h[4:], uint32(r.pos))
	for i := 0; i < r.p.rows; i++ {
		t := int32(0)
		if i < len(toks) {
			t = toks[i]
		}
		binary.LittleEndian.PutUint32(h[8+4*i:], uint32(t))
	}
	if err := r.bufs[r.p.step].UploadAsync(h, r.s); err != nil {
		return err
	}
	if err := launchCalls(r.pcalls, r.s, nil); err != nil {
		return err
	}
	return r.finish(r.p.plogits, out, keep)
}

// enqueue puts the one-row step at r.pos on the stream: the short or the
// long step's (plan.longs) captured graph, captured on first use, or every
// launch.
func (r *Runner) enqueue() error {
	calls, graph := r.calls, &r.graph
	if t := r.p.longAt(r.pos); t >= 0 { // as plan.decodeAt
		calls, graph = r.lcalls[t], &r.lgraphs[t]
	}
	return r.replay(calls, graph)
}

// replay puts calls on the stream as the graph captured of them, capturing
// it on first use (plain launches without graphs).
func (r *Runner) replay(calls []call, graph **cuda.Graph) error {
	if !r.noGraph && *graph == nil {
		g, err := r.s.Capture(func() error { return launchCalls(calls, r.s, r.fork) })
		if err != nil {
			r.noGraph, r.capErr = true, err
		} else {
			*graph = g
		}
	}
	if *graph != nil && !r.noGraph {
		return (*graph).Launch(r.s)
	}
	return launchCalls(calls, r.s, r.fork)
}

func (r *Runner) launchAll() error { return launchCalls(r.calls, r.s, r.fork) }

// launchCalls enqueues cs in order on s (nil: the default stream), the
// side calls on f's stream where f is not nil: forked from s before each
// run of them, joined back to s after the last (a captured step's graph
// then ends only when its side branch has).
func launchCalls(cs []call, s *cuda.Stream, f *fork) error {
	forked := false
	for i := range cs {
		c := &cs[i]
		on := s
		if c.side && f != nil {
			if i == 0 || !cs[i-1].side {
				if err := f.ev.Record(s); err != nil {
					return err
				}
				if err := f.s.Wait(f.ev); err != nil {
					return err
				}
			}
			on, forked = f.s, true
		}
		if err := c.launch(on); err != nil {
			return err
		}
	}
	if !forked {
		return nil
	}
	if err := f.ev.Record(f.s); err != nil {
		return err
	}
	return s.Wait(f.ev)
}

// fork is a runner's second stream, for its steps' side launches
// (warm.go), and the event that forks it from the main stream and joins it
// back.
type fork struct {
	s  *cuda.Stream
	ev *cuda.Event
}

// newFork makes a fork where any of calls runs on the side (else nil).
func newFork(c *cuda.Context, calls ...[]call) (*fork, error) {
	if !slices.ContainsFunc(calls, func(cs []call) bool { return slices.ContainsFunc(cs, func(c call) bool { return c.side }) }) {
		return nil, nil
	}
	s, err := c.NewStream()
	if err != nil {
		return nil, err
	}
	ev, err := c.NewEvent()
	if err != nil {
		s.Destroy()
		return nil, err
	}
	return &fork{s, ev}, nil
}

func (f *fork) destroy() {
	if f != nil {
		f.ev.Destroy()
		f.s.Destroy()
	}
}
