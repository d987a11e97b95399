package generate

import (
	"context"
	"errors"
	"fmt"

	"github.com/jitllm/jitllm/runtime/exec"
)

// Embed runs ids through the model from an empty cache and returns the mean
// over its positions of the final hidden state (the input of the output
// head: after the final norm), unnormalized. Afterwards the session's cache
// holds ids, as a prefill would leave it.
func (s *Session) Embed(ctx context.Context, ids []int32) ([]float32, error) {
	if len(ids) == 0 {
		return nil, errors.New("embed: no tokens")
	}
	if len(ids) > s.r.Context() {
		return nil, fmt.Errorf("%w: %d tokens, context of %d", ErrContext, len(ids), s.r.Context())
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if b, ok := s.r.(batched); ok {
		b.begin()
		defer b.end()
	}
	s.truncate(0)
	var sum []float64
	switch r := s.r.(type) {
	case *slot:
		w := r.e.r.HiddenWidth()
		if w == 0 {
			return nil, errors.New("embed: the model's graph exposes no hidden state")
		}
		sum = make([]float64, w)
		r.hsum = sum
		_, err := r.Forward(ids)
		r.hsum = nil
		if err != nil {
			s.truncate(0)
			return nil, err
		}
	case *exec.Runner:
		w := r.HiddenWidth()
		if w == 0 {
			return nil, errors.New("embed: the model's graph exposes no hidden state")
		}
		sum = make([]float64, w)
		for rest := ids; len(rest) > 0; {
			n := min(len(rest), r.MaxBatch())
			h, err := r.ForwardHidden(rest[:n])
			if err != nil {
				s.truncate(0)
				return nil, err
			}
			for i, v := range h {
				sum[i%w] += float64(v)
			}
			rest = rest[n:]
		}
	default:
		return nil, fmt.Errorf("embed: the %T backend does not expose hidden states", s.r)
	}
	s.st.hist = append(s.st.hist[:0], ids...)
	out := make([]float32, len(sum))
	for i, v := range sum {
		out[i] = float32(v / float64(len(ids)))
	}
	return out, nil
}
