package gpuexec

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/jitllm/jitllm/runtime/cuda"
)

// stageIO is a stage runner's page-locked staging of the rows it takes
// from the previous stage and hands to the next, where runtime/sched
// carries them through host memory (a CPU on either side), and the device
// buffers it made for rows that another GPU stage copies in.
type stageIO struct {
	in, out []float32
	links   []cuda.Buffer
}

// DeviceContext is the CUDA context the runner's buffers live in.
func (r *Runner) DeviceContext() *cuda.Context { return r.c }

// RowsBuffer allocates room on the runner's device for rows rows of its
// stage input (the previous stage's output width), for a GPU stage before
// it to copy its output into (StageStepDevice); Close frees it.
func (r *Runner) RowsBuffer(rows int) (cuda.Buffer, error) {
	w := r.p.input.n
	if w == 0 || rows <= 0 || rows > r.p.rows {
		return cuda.Buffer{}, fmt.Errorf("rows buffer of %d rows of %d values (a stage after the first takes 1 to %d rows)", rows, w, r.p.rows)
	}
	b, err := r.c.Alloc(uint64(4 * rows * w))
	if err != nil {
		return cuda.Buffer{}, err
	}
	if r.stage == nil {
		r.stage = &stageIO{}
	}
	r.stage.links = append(r.stage.links, b)
	return b, nil
}

// MaxRows is the most rows one StageStep carries: the prefill step's rows
// (1 with LogitsAll).
func (r *Runner) MaxRows() int { return r.p.rows }

// pinnedF32 is n float32s of page-locked memory that Close frees.
func (r *Runner) pinnedF32(n int) ([]float32, error) {
	if n == 0 {
		return nil, nil
	}
	h, err := r.c.AllocHost(uint64(4 * n))
	if err != nil {
		return nil, err
	}
	r.pinned = append(r.pinned, h)
	return unsafe.Slice((*float32)(unsafe.Pointer(&h.Bytes()[0])), n), nil
}

func f32AsBytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// StageStep runs n rows (1 to MaxRows) at the next positions through the
// runner's graph, a stage of a model cut at block boundaries
// (exec.Model.Stage): toks feed a first stage's embedding, in (n rows of
// the previous stage's output) a later stage's rows node. It returns every
// row's hidden state (n × width) for a stage that ends before the last
// block, else the last row's logits. One row runs the decode plan (its
// captured graph), more the prefill plan, padded as Forward pads a last
// chunk. The slice is the runner's own (page-locked) and changes on the
// next step.
func (r *Runner) StageStep(toks []int32, in []float32, n int) ([]float32, error) {
	return r.stageStep(toks, in, cuda.Buffer{}, n, cuda.Buffer{})
}

// StageStepDevice is StageStep with the rows carried on the devices: a
// later stage's n input rows come from src (a buffer of this runner's
// context that the stage before filled, e.g. a RowsBuffer), and a hidden
// stage's n output rows are copied into dst (on this device or another:
// a peer copy) instead of to the host; it returns nil for them. A zero src
// takes the host rows in, a zero dst gives host rows, as StageStep. The
// step's copies are done when it returns (it synchronizes its stream), so
// src may be refilled and dst read at once.
func (r *Runner) StageStepDevice(toks []int32, in []float32, src cuda.Buffer, n int, dst cuda.Buffer) ([]float32, error) {
	return r.stageStep(toks, in, src, n, dst)
}

func (r *Runner) stageStep(toks []int32, in []float32, src cuda.Buffer, n int, dst cuda.Buffer) ([]float32, error) {
	p := r.p
	switch {
	case n <= 0 || n > p.rows:
		return nil, fmt.Errorf("stage step of %d rows (1 to %d)", n, p.rows)
	case r.pos+n > r.opt.Context:
		return nil, fmt.Errorf("%d rows at position %d exceed the context of %d positions", n, r.pos, r.opt.Context)
	case r.opt.LogitsAll:
		return nil, fmt.Errorf("stage step: plan stages without LogitsAll")
	}
	inV, outV := p.input, p.logits
	if n > 1 {
		inV, outV = p.pinput, p.plogits
	}
	if inV.off != 0 || outV.off != 0 {
		return nil, fmt.Errorf("stage step: rows views at offsets %d, %d (copies start at an allocation's start)", inV.off, outV.off)
	}
	inW := p.input.n // one row's width; 0: the stage takes tokens
	if inW == 0 {
		if len(toks) != n {
			return nil, fmt.Errorf("stage step: %d tokens for %d rows", len(toks), n)
		}
		for _, t := range toks {
			if t < 0 || int(t) >= p.embRows {
				return nil, fmt.Errorf("token id %d is outside the vocabulary of %d", t, p.embRows)
			}
		}
	} else if src.Size == 0 && len(in) < n*inW {
		return nil, fmt.Errorf("stage step: %d input values for %d rows of %d", len(in), n, inW)
	} else if src.Size != 0 && src.Size < uint64(4*n*inW) {
		return nil, fmt.Errorf("stage step: a %d-byte input buffer for %d rows of %d", src.Size, n, inW)
	}
	if dst.Size != 0 && (!p.hidden || dst.Size < uint64(4*n*p.vocab)) {
		return nil, fmt.Errorf("stage step: a %d-byte output buffer for %d rows of %d (hidden stage: %v)", dst.Size, n, p.vocab, p.hidden)
	}
	if r.stage == nil {
		r.stage = &stageIO{}
	}
	if r.stage.in == nil && inW > 0 && src.Size == 0 {
		var err error
		if r.stage.in, err = r.pinnedF32(p.rows * inW); err != nil {
			return nil, err
		}
	}
	if r.stage.out == nil && p.hidden && dst.Size == 0 {
		var err error
		if r.stage.out, err = r.pinnedF32(p.rows * p.vocab); err != nil {
			return nil, err
		}
	}
	h := r.stepHost
	binary.LittleEndian.PutUint32(h[0:], uint32(n-1))
	binary.LittleEndian.PutUint32(h[4:], uint32(r.pos))
	steps := 1
	if n > 1 {
		steps = p.rows
	}
	for i := 0; i < steps; i++ {
		t := int32(0)
		if inW == 0 && i < n {
			t = toks[i]
		}
		binary.LittleEndian.PutUint32(h[8+4*i:], uint32(t))
	}
	// in stream order: the step bytes and rows, the kernels, the download
	if err := r.bufs[p.step].UploadAsync(h[:4*(2+steps)], r.s); err != nil {
		return nil, err
	}
	if inW > 0 && src.Size != 0 {
		if err := r.bufs[inV.a].CopyAsync(src, uint64(4*n*inW), r.s); err != nil {
			return nil, err
		}
	} else if inW > 0 {
		copy(r.stage.in, in[:n*inW])
		if err := r.bufs[inV.a].UploadAsync(f32AsBytes(r.stage.in[:n*inW]), r.s); err != nil {
			return nil, err
		}
	}
	if n == 1 {
		if err := r.enqueue(); err != nil {
			return nil, err
		}
	} else if err := launchCalls(r.pcalls, r.s, nil); err != nil {
		return nil, err
	}
	var out []float32
	if p.hidden && dst.Size != 0 {
		if err := dst.CopyAsync(r.bufs[outV.a], uint64(4*n*p.vocab), r.s); err != nil {
			return nil, err
		}
		if err := r.s.Synchronize(); err != nil {
			return nil, err
		}
	} else if p.hidden {
		out = r.stage.out[:n*p.vocab]
		if err := r.bufs[outV.a].DownloadAsync(f32AsBytes(out), r.s); err != nil {
			return nil, err
		}
		if err := r.s.Synchronize(); err != nil {
			return nil, err
		}
	} else {
		out = r.hostLog[:p.vocab]
		if err := r.finish(outV, out, true); err != nil {
			return nil, err
		}
	}
	r.pos += n
	return out, nil
}
