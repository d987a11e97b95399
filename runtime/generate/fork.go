package generate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jitllm/jitllm/runtime/sample"
)

// GenerateN runs req once per seed, choice i on sessions[i] sampled with
// seeds[i] (the other sampling parameters are req's). The sessions must be
// distinct slots of one engine: the prompt is prefilled once, on
// sessions[0] (reusing the prefix its cache holds), its KV copied to the
// other slots, and the choices then decode as rows of the same batches.
// step is called from one goroutine per choice. Each choice's result and
// error are returned; a failed prefill fails them all.
func GenerateN(ctx context.Context, sessions []*Session, req Request, seeds []uint64, opt StepOptions, step func(choice int, st Step) error) ([]*Result, []error) {
	n := len(sessions)
	res, errs := make([]*Result, n), make([]error, n)
	fail := func(err error) ([]*Result, []error) {
		for i := range errs {
			errs[i] = err
		}
		return res, errs
	}
	if n == 0 || len(seeds) != n {
		return fail(fmt.Errorf("GenerateN: %d sessions and %d seeds", n, len(seeds)))
	}
	slots := make([]*slot, n)
	for i, s := range sessions {
		sl, ok := s.r.(*slot)
		if !ok || s.st != &sl.st {
			return fail(errors.New("GenerateN: every session must be a slot of an engine"))
		}
		if sl.e != slots0(slots, sl).e {
			return fail(errors.New("GenerateN: the sessions belong to different engines"))
		}
		for _, o := range slots[:i] {
			if o == sl {
				return fail(fmt.Errorf("GenerateN: slot %d is given twice", sl.seq))
			}
		}
		slots[i] = sl
	}
	e := slots[0].e
	first := sessions[0]
	ids, err := first.promptIDs(req)
	if err != nil {
		return fail(err)
	}
	samplers := make([]*sample.Sampler, n)
	for i := range sessions {
		p := req.Sampling
		p.Seed = seeds[i]
		if samplers[i], err = first.newSampler(p, ids, opt); err != nil {
			return fail(err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}

	slots[0].begin()
	start := time.Now()
	r0 := &Result{PromptTokens: ids}
	logits, err := first.prefill(ids, r0)
	if err != nil {
		slots[0].end()
		return fail(err)
	}
	r0.Prefill = time.Since(start)
	res[0] = r0
	// Every choice starts from the prompt's cache and logits; begin them all
	// before any submits a decode, so the loop batches them from the first.
	e.mu.Lock()
	for i, sl := range slots[1:] {
		if err = e.r.CopySeq(int(sl.seq), int(slots[0].seq), len(ids)); err != nil {
			break
		}
		copy(sl.logits, logits)
		sessions[i+1].st.hist = append(sessions[i+1].st.hist[:0], ids...)
		res[i+1] = &Result{PromptTokens: ids, Reused: len(ids)}
	}
	e.mu.Unlock()
	if err != nil {
		slots[0].end()
		return fail(err)
	}
	for _, sl := range slots[1:] {
		sl.begin()
	}
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer slots[i].end()
			l := logits
			if i > 0 {
				l = slots[i].logits[:len(logits)]
			}
			_, errs[i] = sessions[i].decode(ctx, req, samplers[i], l, res[i], func(st Step) error { return step(i, st) })
		}()
	}
	wg.Wait()
	return res, errs
}

// slots0 is the first slot given, or s itself when there is none yet.
func slots0(slots []*slot, s *slot) *slot {
	if slots[0] != nil {
		return slots[0]
	}
	return s
}

// CopyPrefix makes s hold the first n cached positions of src (tokens and
// KV), another idle session of the same engine, so a request that shares
// that prefix with src's history feeds only the rest.
func (s *Session) CopyPrefix(src *Session, n int) error {
	d, ok1 := s.r.(*slot)
	o, ok2 := src.r.(*slot)
	switch {
	case !ok1 || !ok2:
		return errors.New("CopyPrefix: both sessions must be slots of an engine")
	case d.e != o.e:
		return errors.New("CopyPrefix: the sessions belong to different engines")
	case d == o:
		return errors.New("CopyPrefix: a session onto itself")
	case n < 0 || n > len(src.st.hist):
		return fmt.Errorf("CopyPrefix: %d positions of a session holding %d", n, len(src.st.hist))
	}
	d.e.mu.Lock()
	err := d.e.r.CopySeq(int(d.seq), int(o.seq), n)
	d.e.mu.Unlock()
	if err != nil {
		return err
	}
	s.st.hist = append(s.st.hist[:0], src.st.hist[:n]...)
	return nil
}

// CommonPrefix is how many leading tokens of ids the session's cache holds.
func (s *Session) CommonPrefix(ids []int32) int { return commonPrefix(s.st.hist, ids) }

// CommonPrefix is how many leading tokens of ids the snapshot holds.
func (s *Snapshot) CommonPrefix(ids []int32) int { return commonPrefix(s.Tokens, ids) }

// CachedLen is the number of positions the session's cache holds.
func (s *Session) CachedLen() int { return len(s.st.hist) }
