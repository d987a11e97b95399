package gpuexec

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/runtime/cuda"
	"github.com/jitllm/jitllm/runtime/exec"
)

// Runner holds one sequence's state on the GPU (KV caches, position) and the
// planned launches of the graph. Its API mirrors exec.Runner.
type Runner struct {
	m   *exec.Model
	opt exec.Options
	p   *plan

	c       *cuda.Context
	s       *cuda.Stream
	mod     *cuda.Module
	bufs    []cuda.Buffer
	calls   []call
	graph   *cuda.Graph
	noGraph bool  // plain launches (SetGraphs(false), or capture failed)
	capErr  error // why capture failed, if it did

	pos      int
	stepHost []byte
	logits   []float32 // the last row's logits (all rows' with LogitsAll)
}

// call is one planned launch bound to device memory.
type call struct {
	fn          *cuda.Function
	grid, block cuda.Dim3
	args        *cuda.Args
}

// threadsPerBlock is the CTA size of every grid kernel (launch shape never
// changes a result, docs/ptx.md).
const threadsPerBlock = 128

// NewRunner plans m's graph on CUDA device 0: the kernels are rendered to
// PTX for the device's compute capability and loaded as one module, the
// weights the kernels read are uploaded once in their stored layout and the
// KV caches allocated for opt.Context positions (0: the model's trained
// context, capped at 4096). opt.Threads and opt.MaxBatch do not apply: a
// step is one token. Without a driver the error wraps cuda.ErrNoDriver.
func NewRunner(m *exec.Model, opt exec.Options) (*Runner, error) {
	if opt.Context <= 0 {
		opt.Context = m.ContextLength()
		if opt.Context <= 0 || opt.Context > 4096 {
			opt.Context = 4096
		}
	}
	p, err := newPlan(m, opt.Context)
	if err != nil {
		return nil, fmt.Errorf("gpuexec: %w", err)
	}
	if err := cuda.Load(); err != nil {
		return nil, fmt.Errorf("gpuexec: %w", err)
	}
	c, err := cuda.Open(0)
	if err != nil {
		return nil, fmt.Errorf("gpuexec: %w", err)
	}
	r := &Runner{m: m, opt: opt, p: p, c: c, stepHost: make([]byte, 8)}
	if err := r.bind(); err != nil {
		r.Close()
		return nil, fmt.Errorf("gpuexec: %w", err)
	}
	return r, nil
}

func (r *Runner) bind() error {
	p := r.p
	tg := ptx.ForDevice(r.c.Device.Major, r.c.Device.Minor)
	ks := p.kernelList()
	src, err := ptx.Module(ks, tg)
	if err != nil {
		return err
	}
	if r.mod, err = r.c.LoadPTX(src); err != nil {
		return err
	}
	fns := map[*kernel.Kernel]*cuda.Function{}
	for _, k := range ks {
		if fns[k], err = r.mod.Function(k.Name); err != nil {
			return err
		}
	}
	for _, a := range p.allocs {
		b, err := r.c.Alloc(uint64(allocSize(a)))
		if err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		r.bufs = append(r.bufs, b)
		if err := b.Zero(); err != nil {
			return err
		}
		if a.init != nil {
			if err := b.Upload(a.init); err != nil {
				return fmt.Errorf("%s: %w", a.name, err)
			}
		}
	}
	for _, l := range p.launches {
		a := cuda.NewArgs(2 * len(l.args))
		targs := make([]any, len(l.args))
		slot := 0
		for i, prm := range l.k.Params {
			switch v := l.args[i].(type) {
			case view:
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
				return fmt.Errorf("%s: argument %d of type %T", l.k.Name, i, v)
			}
		}
		n, err := ptx.Threads(l.k, tg, targs...)
		if err != nil {
			return fmt.Errorf("%s: %w", l.k.Name, err)
		}
		block := min(max(n, 1), threadsPerBlock)
		grid := (max(n, 1) + block - 1) / block
		r.calls = append(r.calls, call{fns[l.k], cuda.Dim3{X: uint32(grid), Y: 1, Z: 1}, cuda.Dim3{X: uint32(block), Y: 1, Z: 1}, a})
	}
	if r.s, err = r.c.NewStream(); err != nil {
		return err
	}
	rows := 1
	if r.opt.LogitsAll {
		rows = r.opt.Context
	}
	r.logits = make([]float32, rows*p.vocab)
	return nil
}

// Close frees the runner's device memory, module, graph and stream.
func (r *Runner) Close() {
	if r.graph != nil {
		r.graph.Destroy()
	}
	for _, b := range r.bufs {
		b.Free()
	}
	if r.mod != nil {
		r.mod.Unload()
	}
	if r.s != nil {
		r.s.Destroy()
	}
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
}

// Graphs reports whether steps replay a captured graph, and why not when a
// capture failed.
func (r *Runner) Graphs() (bool, error) { return !r.noGraph && r.graph != nil, r.capErr }

// Forward feeds tokens at the next positions and returns the logits of the
// last one (of every token with LogitsAll). The slice is the runner's own
// and changes on the next call.
func (r *Runner) Forward(tokens []int32) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("forward: no tokens")
	}
	if r.pos+len(tokens) > r.opt.Context {
		return nil, fmt.Errorf("%d tokens at position %d exceed the context of %d positions", len(tokens), r.pos, r.opt.Context)
	}
	for _, t := range tokens {
		if t < 0 || int(t) >= r.p.embRows {
			return nil, fmt.Errorf("token id %d is outside the vocabulary of %d", t, r.p.embRows)
		}
	}
	v := r.p.vocab
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

// step runs one token at r.pos; with keep it downloads the logits into out.
func (r *Runner) step(tok int32, out []float32, keep bool) error {
	binary.LittleEndian.PutUint32(r.stepHost[0:], uint32(tok))
	binary.LittleEndian.PutUint32(r.stepHost[4:], uint32(r.pos))
	// A synchronous copy from pageable memory may return before its DMA
	// lands; the context sync orders it before the step's kernels, which
	// run on a non-blocking stream.
	if err := r.bufs[r.p.step].Upload(r.stepHost); err != nil {
		return err
	}
	if err := r.c.Synchronize(); err != nil {
		return err
	}
	if err := r.enqueue(); err != nil {
		return err
	}
	if err := r.s.Synchronize(); err != nil {
		return err
	}
	if !keep {
		return nil
	}
	// planned views start their allocation, so the logits are its first bytes
	b := unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 4*len(out))
	return r.bufs[r.p.logits.a].Download(b)
}

// enqueue puts the step's work on the stream: the captured graph, captured
// on first use, or every launch.
func (r *Runner) enqueue() error {
	if !r.noGraph && r.graph == nil {
		g, err := r.s.Capture(r.launchAll)
		if err != nil {
			r.noGraph, r.capErr = true, err
		} else {
			r.graph = g
		}
	}
	if r.graph != nil && !r.noGraph {
		return r.graph.Launch(r.s)
	}
	return r.launchAll()
}

func (r *Runner) launchAll() error {
	for i := range r.calls {
		c := &r.calls[i]
		if err := c.fn.Launch(c.grid, c.block, 0, r.s, c.args); err != nil {
			return err
		}
	}
	return nil
}
