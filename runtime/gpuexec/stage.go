package gpuexec

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

// stageIO is a stage runner's page-locked staging of the rows it takes
// from the previous stage and hands to the next (runtime/sched copies them
// between devices through host memory).
type stageIO struct {
	in, out []float32
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
	} else if len(in) < n*inW {
		return nil, fmt.Errorf("stage step: %d input values for %d rows of %d", len(in), n, inW)
	}
	if r.stage == nil {
		r.stage = &stageIO{}
		var err error
		if r.stage.in, err = r.pinnedF32(p.rows * inW); err != nil {
			return nil, err
		}
		if p.hidden {
			if r.stage.out, err = r.pinnedF32(p.rows * p.vocab); err != nil {
				return nil, err
			}
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
	if inW > 0 {
		copy(r.stage.in, in[:n*inW])
		if err := r.bufs[inV.a].UploadAsync(f32AsBytes(r.stage.in[:n*inW]), r.s); err != nil {
			return nil, err
		}
	}
	if n == 1 {
		if err := r.enqueue(); err != nil {
			return nil, err
		}
	} else if err := launchCalls(r.pcalls, r.s); err != nil {
		return nil, err
	}
	var out []float32
	if p.hidden {
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
