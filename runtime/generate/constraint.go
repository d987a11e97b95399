package generate

import (
	"fmt"

	"github.com/jitllm/jitllm/runtime/sample"
)

// Constraint restricts which tokens a generation may choose (structured
// output, forced tool calls: runtime/grammar's Constraint implements it).
type Constraint interface {
	// Mask sets the logits of tokens that may not come next to -Inf; an
	// error when none may.
	Mask(logits []float32) error
	// Accept records the token chosen (end-of-generation tokens included).
	Accept(tok int32) error
	// Done reports that the output is complete: generation stops.
	Done() bool
}

// constrained applies a Constraint to a copy of the logits, so that
// Step.Logits stay the model's raw logits (logprobs report those).
type constrained struct {
	c   Constraint
	buf []float32
}

func newConstrained(req Request, vocab int) *constrained {
	if req.Constraint == nil {
		return nil
	}
	return &constrained{c: req.Constraint(), buf: make([]float32, vocab)}
}

func (c *constrained) sample(sm *sample.Sampler, logits []float32) (int32, error) {
	if c == nil {
		return sm.Sample(logits), nil
	}
	copy(c.buf, logits)
	if err := c.c.Mask(c.buf); err != nil {
		return -1, fmt.Errorf("constraint: %w", err)
	}
	next := sm.Sample(c.buf)
	if err := c.c.Accept(next); err != nil {
		return -1, fmt.Errorf("constraint: %w", err)
	}
	return next, nil
}

func (c *constrained) done() bool { return c != nil && c.c.Done() }
