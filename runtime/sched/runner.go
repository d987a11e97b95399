package sched

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/jitllm/jitllm/runtime/cuda"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/gpuexec"
)

// DefaultPiece is the rows of a prompt's piece: what each stage runs a step
// before handing the piece's hidden rows on (capped by every stage's most
// rows a step; a GPU stage takes up to its prefill rows, 256).
const DefaultPiece = 512

// stageRunner is what a stage needs of its backend's runner: both
// exec.Runner and gpuexec.Runner step a stage graph this way.
type stageRunner interface {
	StageStep(toks []int32, in []float32, n int) ([]float32, error)
	Truncate(n int)
	Pos() int
	Context() int
	Close()
}

type stage struct {
	Stage
	r     stageRunner
	gpu   *gpuexec.Runner // r, on a CUDA device
	rows  int             // most rows a step
	width int             // output rows' width (0: logits)
}

// link carries a piece's rows from one stage to the next in two buffers
// (one filled while the other is read): in host memory, or, between two
// GPU stages, on the next stage's device (the stage before copies into it
// device to device or peer to peer, never through the host).
type link struct {
	host [2][]float32
	dev  [2]cuda.Buffer // set for a GPU-to-GPU link
}

// onDevice reports whether the link's rows stay on the devices.
func (l *link) onDevice() bool { return l.dev[0].Size != 0 }

// Runner runs a placed model as a pipeline of stages. It offers what a
// generate session needs of a runner (Forward, Truncate, Pos, Context,
// Close), for one sequence.
type Runner struct {
	stages []*stage
	piece  int
	ctx    int
	// links[s] carries a piece's rows from stage s to stage s+1.
	links []link
}

// Options shape a pipeline runner.
type Options struct {
	exec.Options      // for every stage (Device is set per stage; LogitsAll is not supported)
	Piece        int  // rows of a prompt's piece; 0 = DefaultPiece
	HostLinks    bool // carry rows between GPU stages through host memory too (to compare)
}

// New plans each stage of pl on its device: the model cut to the stage's
// blocks (exec.Model.Stage), run by runtime/exec on a CPU and
// runtime/gpuexec on a CUDA device. CPU stages share the host's cores
// (opt.Threads 0: an even share each).
func New(m *exec.Model, pl Placement, opt Options) (*Runner, error) {
	if len(pl) == 0 {
		return nil, errors.New("sched: an empty placement")
	}
	if opt.LogitsAll {
		return nil, errors.New("sched: a pipeline returns the last row's logits; LogitsAll is not supported")
	}
	if opt.Piece <= 0 {
		opt.Piece = DefaultPiece
	}
	if opt.Context <= 0 {
		opt.Context = m.ContextLength()
		if opt.Context <= 0 || opt.Context > 4096 {
			opt.Context = 4096
		}
	}
	cpus := 0
	for i, s := range pl {
		if i > 0 && s.Lo != pl[i-1].Hi || i == 0 && s.Lo != 0 {
			return nil, fmt.Errorf("sched: stage %d starts at block %d, not where the one before ends", i, s.Lo)
		}
		if s.Device.Kind == "cpu" {
			cpus++
		}
	}
	if pl[len(pl)-1].Hi != m.Graph.Layers {
		return nil, fmt.Errorf("sched: the stages end at block %d of %d", pl[len(pl)-1].Hi, m.Graph.Layers)
	}
	r := &Runner{piece: opt.Piece, ctx: opt.Context}
	for _, s := range pl {
		sm, err := m.Stage(s.Lo, s.Hi)
		if err != nil {
			r.Close()
			return nil, err
		}
		st, err := newStage(sm, s, opt.Options, opt.Piece, cpus)
		if err != nil {
			r.Close()
			return nil, err
		}
		r.stages = append(r.stages, st)
		r.piece = min(r.piece, st.rows)
		r.ctx = min(r.ctx, st.r.Context())
	}
	r.links = make([]link, len(r.stages)-1)
	for i, s := range r.stages[:len(r.stages)-1] {
		l, next := &r.links[i], r.stages[i+1]
		if s.gpu == nil || next.gpu == nil || opt.HostLinks {
			l.host = [2][]float32{make([]float32, r.piece*s.width), make([]float32, r.piece*s.width)}
			continue
		}
		// Direct access where the devices allow it; a peer copy works
		// without (the driver stages it).
		if _, err := s.gpu.DeviceContext().EnablePeerAccess(next.gpu.DeviceContext()); err != nil {
			r.Close()
			return nil, fmt.Errorf("sched: peer access from %s to %s: %w", s.Device.ID, next.Device.ID, err)
		}
		for b := range l.dev {
			var err error
			if l.dev[b], err = next.gpu.RowsBuffer(r.piece); err != nil {
				r.Close()
				return nil, fmt.Errorf("sched: rows buffer on %s: %w", next.Device.ID, err)
			}
		}
	}
	return r, nil
}

// step runs stage i on n rows: its input from buffer in of link i-1 (h:
// the host rows, when that link is in host memory), its output into buffer
// out of link i when that link is on the devices (the result is then nil).
func (r *Runner) step(i int, toks []int32, h []float32, n, in, out int) ([]float32, error) {
	s := r.stages[i]
	var src, dst cuda.Buffer
	if i > 0 && r.links[i-1].onDevice() {
		src = r.links[i-1].dev[in]
	}
	if i < len(r.links) && r.links[i].onDevice() {
		dst = r.links[i].dev[out]
	}
	if src.Size == 0 && dst.Size == 0 {
		return s.r.StageStep(toks, h, n)
	}
	return s.gpu.StageStepDevice(toks, h, src, n, dst)
}

// newStage plans stage model sm on s's device with rows rows a step at
// most; CPU stages share the host's cores between cpus of them (opt.Threads
// 0: an even share each).
func newStage(sm *exec.Model, s Stage, o exec.Options, rows, cpus int) (*stage, error) {
	o.MaxBatch = rows
	st := &stage{Stage: s}
	switch s.Device.Kind {
	case "cpu":
		if o.Threads == 0 && cpus > 1 {
			o.Threads = max(1, runtime.NumCPU()/cpus)
		}
		er, err := exec.NewRunner(sm, o)
		if err != nil {
			return nil, fmt.Errorf("sched: stage on %s: %w", s.Device.ID, err)
		}
		st.r, st.rows = er, er.MaxBatch()
	case "cuda":
		o.Device = s.Device.Ordinal
		gr, err := gpuexec.NewRunner(sm, o)
		if err != nil {
			return nil, fmt.Errorf("sched: stage on %s: %w", s.Device.ID, err)
		}
		st.r, st.rows, st.gpu = gr, gr.MaxRows(), gr
	default:
		return nil, fmt.Errorf("sched: no backend for device %s (kind %q)", s.Device.ID, s.Device.Kind)
	}
	_, st.width = sm.StageWidth()
	return st, nil
}

// Stages is the placement the runner runs.
func (r *Runner) Stages() Placement {
	p := make(Placement, len(r.stages))
	for i, s := range r.stages {
		p[i] = s.Stage
	}
	return p
}

// Piece is the rows of a prompt's piece.
func (r *Runner) Piece() int { return r.piece }

// Close frees every stage.
func (r *Runner) Close() {
	for _, s := range r.stages {
		s.r.Close()
	}
	r.stages = nil
}

// Pos is the number of positions in the cache (every stage holds as many).
func (r *Runner) Pos() int { return r.stages[0].r.Pos() }

// Context is the KV cache's capacity in positions.
func (r *Runner) Context() int { return r.ctx }

// Truncate forgets positions from n on in every stage.
func (r *Runner) Truncate(n int) {
	for _, s := range r.stages {
		s.r.Truncate(n)
	}
}

// Forward feeds tokens at the next positions and returns the last one's
// logits (the last stage's own slice, changed by the next call). A prompt
// runs in pieces of Piece rows: stage s works on piece p while stage s+1
// works on piece p-1. With the pieces a single runner's chunks, the logits
// are that runner's bit for bit (each stage computes what its blocks
// compute there). On an error every stage is truncated back to where the
// call began.
func (r *Runner) Forward(tokens []int32) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, errors.New("forward: no tokens")
	}
	start := r.Pos()
	if start+len(tokens) > r.ctx {
		return nil, fmt.Errorf("%d tokens at position %d exceed the context of %d positions", len(tokens), start, r.ctx)
	}
	var out []float32
	var err error
	if len(tokens) <= r.piece || len(r.stages) == 1 {
		out, err = r.sequential(tokens)
	} else {
		out, err = r.pipelined(tokens)
	}
	if err != nil {
		r.Truncate(start)
		return nil, err
	}
	return out, nil
}

// sequential runs pieces through every stage in turn (a decode step, or a
// prompt of one piece): no goroutines, nothing allocated.
func (r *Runner) sequential(tokens []int32) ([]float32, error) {
	var out []float32
	for len(tokens) > 0 {
		n := min(len(tokens), r.piece)
		var h []float32
		for i, s := range r.stages {
			var err error
			if h, err = r.step(i, tokens[:n], h, n, 0, 0); err != nil {
				return nil, fmt.Errorf("stage %d (%s): %w", i, s.Device.ID, err)
			}
		}
		out = h
		tokens = tokens[n:]
	}
	return out, nil
}

// pipelined runs the pieces with one goroutine a stage: stage s takes
// piece p's rows from link s-1, steps, and copies its output into a free
// buffer of link s for stage s+1.
func (r *Runner) pipelined(tokens []int32) ([]float32, error) {
	k := len(r.stages)
	pieces := (len(tokens) + r.piece - 1) / r.piece
	full := make([]chan int, k-1) // buffer indices ready for stage s+1
	free := make([]chan int, k-1) // buffer indices stage s may fill
	for s := range full {
		full[s], free[s] = make(chan int, 2), make(chan int, 2)
		free[s] <- 0
		free[s] <- 1
	}
	done := make(chan struct{})
	var once sync.Once
	var firstErr error
	fail := func(err error) {
		once.Do(func() { firstErr = err; close(done) })
	}
	var last []float32
	var wg sync.WaitGroup
	for s := range r.stages {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			st := r.stages[s]
			for p := 0; p < pieces; p++ {
				toks := tokens[p*r.piece : min(len(tokens), (p+1)*r.piece)]
				n := len(toks)
				var in []float32
				inBuf, b := -1, -1
				if s > 0 {
					select {
					case inBuf = <-full[s-1]:
					case <-done:
						return
					}
					if l := &r.links[s-1]; !l.onDevice() {
						in = l.host[inBuf][:n*r.stages[s-1].width]
					}
				}
				if s < k-1 && r.links[s].onDevice() {
					// the step copies its rows into the buffer: take it first
					select {
					case b = <-free[s]:
					case <-done:
						return
					}
				}
				out, err := r.step(s, toks, in, n, inBuf, b)
				if err != nil {
					fail(fmt.Errorf("stage %d (%s), rows %d-%d: %w", s, st.Device.ID, p*r.piece, p*r.piece+n-1, err))
					return
				}
				if s > 0 {
					free[s-1] <- inBuf // never blocks: the buffer came from this link
				}
				if s == k-1 {
					last = out
					continue
				}
				if b < 0 {
					select {
					case b = <-free[s]:
					case <-done:
						return
					}
					copy(r.links[s].host[b], out)
				}
				full[s] <- b
			}
		}(s)
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return last, nil
}
