package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jitllm/jitllm/runtime/generate"
	"github.com/jitllm/jitllm/runtime/sample"
)

// genSpec is one generation as the API handlers ask for it.
type genSpec struct {
	tokens      []int32 // the prompt, tokenized
	maxTokens   int     // 0 = until end of generation or a full context
	params      sample.Params
	stops       []string
	logprobs    bool
	topLogprobs int
}

// tokenLP is one generated token's log-probability and its alternatives.
type tokenLP struct {
	id     int32
	text   string
	bytes  []byte
	lp     float32
	top    []altLP
	offset int // byte offset of the token's text in the completion
}

type altLP struct {
	id    int32
	text  string
	bytes []byte
	lp    float32
}

// genOut is what a generation produced.
type genOut struct {
	text             string
	tokens           []tokenLP // with spec.logprobs: the tokens the text holds
	finish           string    // "stop" (end of generation or a stop sequence) or "length"
	stopSeq          string    // the stop sequence that ended it, if one did
	promptTokens     int
	completionTokens int
}

// errContext is the context overflow the handlers answer with 400.
var errContext = errors.New("context overflow")

// checkFit refuses prompts that leave no room to generate.
func checkFit(m *model, n int) error {
	if limit := m.pool.context(); n >= limit {
		return fmt.Errorf("%w: the prompt is %d tokens and the context is %d tokens; shorten the prompt", errContext, n, limit)
	}
	return nil
}

// generate runs spec on sess, calling chunk with text as it becomes safe
// to show (never text that a stop sequence could still claim) and, with
// logprobs, the tokens that text completes.
func (s *Server) generate(ctx context.Context, m *model, sess *generate.Session, spec genSpec, start time.Time, chunk func(text string, toks []tokenLP) error) (genOut, error) {
	st := stopper{stops: spec.stops}
	var lpBuf []float32
	var idxBuf []int32
	if spec.logprobs {
		lpBuf = make([]float32, m.m.Exec.VocabSize())
	}
	var out genOut
	var text strings.Builder
	var pending []tokenLP // tokens whose text is not yet shown
	var shownToks []tokenLP
	offset := 0
	last := time.Time{}
	release := func(upto int, all bool) []tokenLP {
		n := 0
		for n < len(pending) && (all || pending[n].offset < upto && pending[n].offset+len(pending[n].text) <= upto) {
			n++
		}
		r := pending[:n:n]
		pending = pending[n:]
		return r
	}
	emit := func(t string, toks []tokenLP) error {
		text.WriteString(t)
		if spec.logprobs {
			shownToks = append(shownToks, toks...)
		}
		if t == "" && len(toks) == 0 {
			return nil
		}
		return chunk(t, toks)
	}
	errStop := errors.New("stop sequence")
	res, err := sess.GenerateSteps(ctx, generate.Request{Tokens: spec.tokens, MaxTokens: spec.maxTokens, Sampling: spec.params},
		generate.StepOptions{GeneratedPenaltiesOnly: true}, func(step generate.Step) error {
			now := time.Now()
			if step.Token >= 0 {
				if last.IsZero() {
					s.metrics.ttft.WithLabelValues(m.id).Observe(now.Sub(start).Seconds())
				} else {
					s.metrics.itl.WithLabelValues(m.id).Observe(now.Sub(last).Seconds())
				}
				last = now
				if spec.logprobs {
					pending = append(pending, s.logprob(m, step, spec.topLogprobs, lpBuf, &idxBuf, offset))
				}
			}
			offset += len(step.Text)
			show, stopped := st.add(step.Text)
			if stopped {
				// The stop sequence begins at st.shown.
				toks := release(st.shown, false)
				if spec.logprobs && len(pending) > 0 && pending[0].offset < st.shown {
					toks = append(toks, pending[0]) // a token that straddles the cut
				}
				if err := emit(show, toks); err != nil {
					return err
				}
				out.stopSeq = st.matched
				return errStop
			}
			return emit(show, release(st.shown, false))
		})
	if res != nil {
		out.promptTokens = len(res.PromptTokens)
		out.completionTokens = len(res.Tokens)
	}
	switch {
	case errors.Is(err, errStop):
		out.finish = "stop"
	case err != nil:
		return out, err
	default:
		if err := emit(st.flush(), release(0, true)); err != nil {
			return out, err
		}
		out.finish = "stop"
		if res.StopReason == "length" || res.StopReason == "context" {
			out.finish = "length"
		}
	}
	out.text = text.String()
	out.tokens = shownToks
	s.metrics.tokensIn.WithLabelValues(m.id).Add(float64(out.promptTokens))
	s.metrics.tokensOut.WithLabelValues(m.id).Add(float64(out.completionTokens))
	return out, nil
}

// logprob computes a step's log-probabilities with LogSoftmax on the raw
// logits.
func (s *Server) logprob(m *model, step generate.Step, top int, buf []float32, idx *[]int32, offset int) tokenLP {
	tok := m.m.Tok
	sample.LogSoftmax(step.Logits, buf)
	p := tok.Piece(step.Token)
	t := tokenLP{id: step.Token, text: string(p), bytes: append([]byte(nil), p...), lp: buf[step.Token], offset: offset}
	if top > 0 {
		*idx = sample.TopN(step.Logits, top, (*idx)[:0])
		for _, id := range *idx {
			q := tok.Piece(id)
			t.top = append(t.top, altLP{id: id, text: string(q), bytes: append([]byte(nil), q...), lp: buf[id]})
		}
	}
	return t
}

// stopper finds stop sequences in streamed text, holding back the longest
// tail that could still become one.
type stopper struct {
	stops   []string
	held    string
	shown   int // bytes released so far
	done    bool
	matched string
}

// add appends text and returns what may be shown now; stopped reports
// that a stop sequence was found (the text shown excludes it).
func (s *stopper) add(text string) (show string, stopped bool) {
	if s.done {
		return "", true
	}
	s.held += text
	if len(s.stops) == 0 {
		show, s.held = s.held, ""
		s.shown += len(show)
		return show, false
	}
	first, which := -1, ""
	for _, st := range s.stops {
		if i := strings.Index(s.held, st); i >= 0 && (first < 0 || i < first || i == first && len(st) > len(which)) {
			first, which = i, st
		}
	}
	if first >= 0 {
		show = s.held[:first]
		s.held = ""
		s.shown += len(show)
		s.done, s.matched = true, which
		return show, true
	}
	hold := 0
	for _, st := range s.stops {
		for k := min(len(st)-1, len(s.held)); k > hold; k-- {
			if strings.HasSuffix(s.held, st[:k]) {
				hold = k
				break
			}
		}
	}
	show = s.held[:len(s.held)-hold]
	s.held = s.held[len(s.held)-hold:]
	s.shown += len(show)
	return show, false
}

// flush releases what is held at the end of the generation.
func (s *stopper) flush() string {
	out := s.held
	s.held = ""
	s.shown += len(out)
	return out
}
