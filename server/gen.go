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
	fork        *fork                      // n > 1 choices: newFork(n)
	constraint  func() generate.Constraint // structured output, forced tool calls (tools.go)
	markers     map[int32]string           // control tokens shown as their text (tool-call markers)
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

// checkRoom refuses at once a request whose prompt and max_tokens cannot
// fit the context (a slot holds at most the context's positions).
func checkRoom(m *model, prompt, maxTokens int) error {
	if err := checkFit(m, prompt); err != nil {
		return err
	}
	if limit := m.pool.context(); maxTokens > 0 && prompt+maxTokens > limit {
		return fmt.Errorf("%w: the prompt is %d tokens and max_tokens is %d, %d in all, and the context is %d tokens; lower max_tokens or shorten the prompt",
			errContext, prompt, maxTokens, prompt+maxTokens, limit)
	}
	return nil
}

// errStopSeq ends a generation at a stop sequence.
var errStopSeq = errors.New("stop sequence")

// generate runs spec on sess, calling chunk with text as it becomes safe
// to show (never text that a stop sequence could still claim) and, with
// logprobs, the tokens that text completes. With spec.fork (n choices),
// the first call prefills once and decodes as many choices as there are
// free slots together; the calls for the next choices return theirs.
func (s *Server) generate(ctx context.Context, m *model, sess *generate.Session, spec genSpec, start time.Time, chunk func(text string, toks []tokenLP) error) (genOut, error) {
	ctx, unbind := m.bind(ctx) // an unload cancels it after its grace period
	defer unbind()
	if out, err, ok := spec.fork.take(spec.params.Seed, chunk); ok {
		return out, err
	}
	need := m.pool.context()
	if spec.maxTokens > 0 {
		need = min(need, len(spec.tokens)+spec.maxTokens)
	}
	m.pool.warm(sess, spec.tokens)
	m.pool.fromHot(sess, spec.tokens)
	m.pool.reserve(sess, need)
	if f := spec.fork; f != nil && f.left > 1 {
		if extra := m.pool.tryExtra(f.left-1, need); len(extra) > 0 {
			return s.generateForked(ctx, m, append([]*generate.Session{sess}, extra...), spec, start, chunk)
		}
	}
	if spec.fork != nil {
		spec.fork.left--
	}
	g := s.newRun(m, spec, start, chunk)
	res, err := sess.GenerateSteps(ctx, spec.request(), generate.StepOptions{GeneratedPenaltiesOnly: true}, g.step)
	if res != nil {
		m.pool.noteHot(sess, res.PromptTokens, res.Reused)
	}
	return g.finish(res, err)
}

// request is the runtime's form of spec.
func (spec *genSpec) request() generate.Request {
	return generate.Request{Tokens: spec.tokens, MaxTokens: spec.maxTokens, Sampling: spec.params, Constraint: spec.constraint, NeedLogits: spec.logprobs}
}

// generateForked runs len(sessions) choices of spec from one prefill, the
// first streamed through chunk, the others kept for the next calls.
func (s *Server) generateForked(ctx context.Context, m *model, sessions []*generate.Session, spec genSpec, start time.Time, chunk func(text string, toks []tokenLP) error) (genOut, error) {
	defer func() {
		for _, x := range sessions[1:] {
			m.pool.release(x)
		}
	}()
	k := len(sessions)
	seeds := make([]uint64, k)
	runs := make([]*genRun, k)
	kept := make([]*keptChoice, k)
	for i := range sessions {
		seeds[i] = spec.params.Seed + uint64(i) // the handlers' seed for choice i
		c := chunk
		if i > 0 {
			kc := &keptChoice{seed: seeds[i]}
			kept[i] = kc
			c = func(text string, toks []tokenLP) error {
				kc.chunks = append(kc.chunks, keptChunk{text, toks})
				return nil
			}
		}
		runs[i] = s.newRun(m, spec, start, c)
	}
	res, errs := generate.GenerateN(ctx, sessions, spec.request(), seeds, generate.StepOptions{GeneratedPenaltiesOnly: true},
		func(i int, st generate.Step) error { return runs[i].step(st) })
	if res[0] != nil {
		m.pool.noteHot(sessions[0], res[0].PromptTokens, res[0].Reused)
	}
	outs := make([]genOut, k)
	for i := range sessions {
		outs[i], errs[i] = runs[i].finish(res[i], errs[i])
		if i > 0 {
			kept[i].out, kept[i].err = outs[i], errs[i]
		}
	}
	spec.fork.left -= k
	spec.fork.kept = kept[1:]
	return outs[0], errs[0]
}

// fork carries a request's n choices between the handler's calls of
// generate (one per choice, in order).
type fork struct {
	left int // choices not yet decoded
	kept []*keptChoice
}

type keptChoice struct {
	seed   uint64
	chunks []keptChunk
	out    genOut
	err    error
}

type keptChunk struct {
	text string
	toks []tokenLP
}

// newFork is the fork state of a request of n choices (nil for one).
func newFork(n int) *fork {
	if n <= 1 {
		return nil
	}
	return &fork{left: n}
}

// take replays the next kept choice if it was decoded with seed.
func (f *fork) take(seed uint64, chunk func(string, []tokenLP) error) (genOut, error, bool) {
	if f == nil {
		return genOut{}, nil, false
	}
	if len(f.kept) == 0 || f.kept[0].seed != seed {
		f.kept = nil // out of step with the handler: decode the rest anew
		return genOut{}, nil, false
	}
	kc := f.kept[0]
	f.kept = f.kept[1:]
	for _, c := range kc.chunks {
		if err := chunk(c.text, c.toks); err != nil {
			return kc.out, err, true
		}
	}
	return kc.out, kc.err, true
}

// genRun is one choice's stop-sequence, logprob and metrics state.
type genRun struct {
	s         *Server
	m         *model
	spec      genSpec
	start     time.Time
	chunk     func(text string, toks []tokenLP) error
	st        stopper
	lpBuf     []float32
	idxBuf    []int32
	out       genOut
	text      strings.Builder
	pending   []tokenLP // tokens whose text is not yet shown
	shownToks []tokenLP
	offset    int
	last      time.Time
}

func (s *Server) newRun(m *model, spec genSpec, start time.Time, chunk func(text string, toks []tokenLP) error) *genRun {
	g := &genRun{s: s, m: m, spec: spec, start: start, chunk: chunk, st: stopper{stops: spec.stops}}
	if spec.logprobs {
		g.lpBuf = make([]float32, m.m.Exec.VocabSize())
	}
	return g
}

func (g *genRun) release(upto int, all bool) []tokenLP {
	n := 0
	for n < len(g.pending) && (all || g.pending[n].offset < upto && g.pending[n].offset+len(g.pending[n].text) <= upto) {
		n++
	}
	r := g.pending[:n:n]
	g.pending = g.pending[n:]
	return r
}

func (g *genRun) emit(t string, toks []tokenLP) error {
	g.text.WriteString(t)
	if g.spec.logprobs {
		g.shownToks = append(g.shownToks, toks...)
	}
	if t == "" && len(toks) == 0 {
		return nil
	}
	return g.chunk(t, toks)
}

func (g *genRun) step(step generate.Step) error {
	now := time.Now()
	id := g.m.id
	if step.Token >= 0 {
		if g.last.IsZero() {
			g.s.metrics.ttft.WithLabelValues(id).Observe(now.Sub(g.start).Seconds())
		} else {
			g.s.metrics.itl.WithLabelValues(id).Observe(now.Sub(g.last).Seconds())
		}
		g.last = now
		if g.spec.logprobs {
			g.pending = append(g.pending, g.s.logprob(g.m, step, g.spec.topLogprobs, g.lpBuf, &g.idxBuf, g.offset))
		}
	}
	if t, ok := g.spec.markers[step.Token]; ok { // a tool-call marker decodes to no text
		step.Text = t + step.Text
	}
	g.offset += len(step.Text)
	show, stopped := g.st.add(step.Text)
	if stopped {
		// The stop sequence begins at st.shown.
		toks := g.release(g.st.shown, false)
		if g.spec.logprobs && len(g.pending) > 0 && g.pending[0].offset < g.st.shown {
			toks = append(toks, g.pending[0]) // a token that straddles the cut
		}
		if err := g.emit(show, toks); err != nil {
			return err
		}
		g.out.stopSeq = g.st.matched
		return errStopSeq
	}
	return g.emit(show, g.release(g.st.shown, false))
}

// finish turns the generation's end into the choice's answer.
func (g *genRun) finish(res *generate.Result, err error) (genOut, error) {
	m, out := g.m, &g.out
	if res != nil {
		out.promptTokens = len(res.PromptTokens)
		out.completionTokens = len(res.Tokens)
		g.s.metrics.prefixReused.WithLabelValues(m.id).Add(float64(res.Reused))
		if res.Drafted > 0 {
			g.s.metrics.drafted.WithLabelValues(m.id, "true").Add(float64(res.Accepted))
			g.s.metrics.drafted.WithLabelValues(m.id, "false").Add(float64(res.Drafted - res.Accepted))
		}
	}
	switch {
	case errors.Is(err, errStopSeq):
		out.finish = "stop"
	case err != nil:
		return *out, m.lifeErr(err)
	default:
		if err := g.emit(g.st.flush(), g.release(0, true)); err != nil {
			return *out, err
		}
		out.finish = "stop"
		if res.StopReason == "length" || res.StopReason == "context" {
			out.finish = "length"
		}
	}
	out.text = g.text.String()
	out.tokens = g.shownToks
	g.s.metrics.tokensIn.WithLabelValues(m.id).Add(float64(out.promptTokens))
	g.s.metrics.tokensOut.WithLabelValues(m.id).Add(float64(out.completionTokens))
	return *out, nil
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
