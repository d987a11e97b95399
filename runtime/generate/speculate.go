package generate

import (
	"context"
	"fmt"

	"github.com/jitllm/jitllm/runtime/sample"
)

// Speculative decoding: a drafter guesses the next few tokens, and one step
// of the model feeds the token just chosen together with the guesses,
// returning logits for every row. The generation then chooses token after
// token from those rows exactly as it would one step at a time (the same
// sampler, penalties, constraint and random draws), and keeps going while
// the chosen token is the one drafted for that row: every guess that
// matches saves a step. What is generated is what plain decoding generates
// from the same logits, whatever the drafter proposes; only the rounding
// between one-row and several-row kernels (as TestBatchEqualsStepwise
// bounds) can separate them where two logits all but tie.

// Drafter guesses how a sequence goes on.
type Drafter interface {
	// Draft appends to dst at most k tokens guessed to follow hist and
	// then next (hist: the tokens before next, which the caller may not
	// change). Fewer, or none, are fine.
	Draft(hist []int32, next int32, k int, dst []int32) ([]int32, error)
}

// rowsForwarder is a runner that returns every row's logits of one step
// (exec.Runner, an engine slot).
type rowsForwarder interface {
	ForwardRows(tokens []int32) ([]float32, error)
}

// MaxDraft bounds Speculate's k: more guesses than this only add rows that
// are almost never kept.
const MaxDraft = 32

type speculation struct {
	d      Drafter
	k      int
	drafts []int32 // scratch: this step's guesses
	rows   []int32 // scratch: the chosen token, then the guesses
}

// Speculate makes the session's generations speculative, with d drafting
// up to k tokens a step; nil d turns it off. The session's runner must
// return every row of a step (the CPU and CUDA runners and engine sessions
// do; split runners do not yet).
func (s *Session) Speculate(d Drafter, k int) error {
	if d == nil {
		s.spec = nil
		return nil
	}
	if _, ok := s.r.(rowsForwarder); !ok {
		return fmt.Errorf("speculative decoding: a %T does not return every row's logits of a step", s.r)
	}
	if k < 1 || k > MaxDraft {
		return fmt.Errorf("speculative decoding: %d drafted tokens a step; want 1 to %d", k, MaxDraft)
	}
	s.spec = &speculation{d: d, k: k, drafts: make([]int32, 0, k), rows: make([]int32, 0, k+1)}
	return nil
}

// speculative is plain with a drafter: each step feeds the chosen token and
// the drafter's guesses for what follows it.
func (d *decoding) speculative(ctx context.Context, rf rowsForwarder, logits []float32) error {
	s, sp := d.s, d.s.spec
	v := len(logits)
	next, err := d.con.sample(d.sm, logits)
	if err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		base := s.r.Pos()
		stop, err := d.emit(next, logits, base)
		if err != nil {
			return err
		}
		if stop != "" {
			d.res.StopReason = stop
			return nil
		}
		// Guess no further than the context, the token limit and a step hold.
		k := min(sp.k, d.limit-base-1)
		if d.req.MaxTokens > 0 {
			k = min(k, d.req.MaxTokens-len(d.res.Tokens)-1)
		}
		drafts := sp.drafts[:0]
		if k > 0 {
			if drafts, err = sp.d.Draft(s.st.hist, next, k, drafts); err != nil {
				return fmt.Errorf("draft: %w", err)
			}
			drafts = drafts[:min(len(drafts), k)]
		}
		rows := append(append(sp.rows[:0], next), drafts...)
		all, err := rf.ForwardRows(rows)
		if err != nil {
			s.truncate(0)
			return err
		}
		s.st.hist = append(s.st.hist, rows...)
		d.res.Drafted += len(drafts)
		// Row i's logits follow rows 0..i: choose from them in turn while
		// the choice is the guess that row i+1 already fed.
		for i := 0; ; i++ {
			logits = all[i*v : (i+1)*v]
			tok, err := d.con.sample(d.sm, logits)
			if err != nil {
				s.truncate(base + 1 + i)
				return err
			}
			if i == len(drafts) || tok != drafts[i] {
				s.truncate(base + 1 + i) // the guesses from row i+1 on were wrong
				next = tok
				break
			}
			d.res.Accepted++
			stop, err := d.emit(tok, logits, base+1+i)
			if err != nil || stop != "" {
				s.truncate(base + 1 + i) // as plain decoding leaves it: the last token not fed
				d.res.StopReason = stop
				return err
			}
		}
	}
}

// ModelDrafter drafts with a smaller model of the same vocabulary: its
// greedy continuation, computed in a session of its own whose cache
// follows the generation (only what it lacks is fed each step).
type ModelDrafter struct {
	s    *Session
	feed []int32 // scratch: the tokens the draft's cache lacks
}

// NewModelDrafter drafts for target with the session s of a draft model.
// The two must share the vocabulary: same size, same special tokens and the
// same token texts.
func NewModelDrafter(s *Session, target *Model) (*ModelDrafter, error) {
	dt, tt := s.m.Tok, target.Tok
	if dt.VocabSize() != tt.VocabSize() {
		return nil, fmt.Errorf("draft model: %d tokens, the model has %d", dt.VocabSize(), tt.VocabSize())
	}
	if dt.BOS() != tt.BOS() || dt.EOS() != tt.EOS() {
		return nil, fmt.Errorf("draft model: BOS/EOS %d/%d, the model's %d/%d", dt.BOS(), dt.EOS(), tt.BOS(), tt.EOS())
	}
	for id := int32(0); int(id) < tt.VocabSize(); id++ {
		if dt.Token(id) != tt.Token(id) {
			return nil, fmt.Errorf("draft model: token %d is %q, the model's is %q", id, dt.Token(id), tt.Token(id))
		}
	}
	return &ModelDrafter{s: s}, nil
}

// Draft feeds the draft session what it lacks of hist and next and takes
// its argmax k times (stopping early at an end-of-generation token).
func (m *ModelDrafter) Draft(hist []int32, next int32, k int, dst []int32) ([]int32, error) {
	ds := m.s
	n := len(hist) + 1
	k = min(k, ds.r.Context()-n+1) // the last guess is never fed
	if k <= 0 {
		return dst, nil
	}
	if ds.r.Pos() != len(ds.st.hist) { // the runner moved without the session
		ds.truncate(0)
		ds.st.hist = ds.st.hist[:0]
	}
	keep := commonPrefix(ds.st.hist, hist)
	if keep == len(hist) && len(ds.st.hist) > keep && ds.st.hist[keep] == next {
		keep++
	}
	if keep == n {
		keep-- // its logits are not kept: feed the last again
	}
	feed := m.feed[:0]
	if keep < len(hist) {
		feed = append(feed, hist[keep:]...)
	}
	feed = append(feed, next)
	m.feed = feed
	ds.truncate(keep)
	greedy, _ := ds.r.(greedyStepper)
	if greedy != nil && !greedy.Greedy() {
		greedy = nil
	}
	start := len(dst)
	for {
		var tok int32
		if greedy != nil {
			t, err := greedy.ForwardGreedy(feed)
			if err != nil {
				ds.truncate(0)
				return dst, err
			}
			tok = t
		} else {
			logits, err := ds.r.Forward(feed)
			if err != nil {
				ds.truncate(0)
				return dst, err
			}
			tok = sample.Argmax(logits)
		}
		ds.st.hist = append(ds.st.hist, feed...)
		dst = append(dst, tok)
		if len(dst)-start == k || ds.m.Tok.IsEOG(tok) {
			break
		}
		feed = m.feed[:1]
		feed[0] = tok
	}
	return dst, nil
}

// LookupDrafter drafts by prompt lookup: it finds the latest earlier place
// where the sequence's last N tokens (N from MaxN down to MinN) occurred and
// guesses that what followed there follows again. It needs no model, and
// wins where the output repeats its input (code edits, quoting, extraction).
type LookupDrafter struct {
	MinN, MaxN int
}

// Draft implements Drafter.
func (l LookupDrafter) Draft(hist []int32, next int32, k int, dst []int32) ([]int32, error) {
	at := func(i int) int32 {
		if i == len(hist) {
			return next
		}
		return hist[i]
	}
	n0 := len(hist) + 1
	for n := min(l.MaxN, n0-1); n >= max(l.MinN, 1); n-- {
		tail := n0 - n
	search:
		for j := tail - 1; j >= 0; j-- {
			for i := 0; i < n; i++ {
				if at(j+i) != at(tail+i) {
					continue search
				}
			}
			for i := j + n; i < n0 && k > 0; i++ {
				dst = append(dst, at(i))
				k--
			}
			return dst, nil
		}
	}
	return dst, nil
}
