// Package generate is the one path from a prompt to streamed text that the
// CLI and the server share: open a model file, tokenize, prefill, sample,
// detokenize as tokens arrive, stop at end-of-generation or a limit.
package generate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jitllm/jitllm/runtime/devices"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/gpuexec"
	"github.com/jitllm/jitllm/runtime/sample"
	"github.com/jitllm/jitllm/runtime/tokenizer"
	"github.com/jitllm/jitllm/runtime/weights"
)

// Model is an opened model: weights bound to its graph, and its tokenizer.
type Model struct {
	Path string
	Src  weights.Source
	Exec *exec.Model
	Tok  *tokenizer.Tokenizer
}

// Open opens a .gguf or .jlm file and prepares it to run.
func Open(path string) (*Model, error) {
	src, err := weights.Open(path)
	if err != nil {
		return nil, err
	}
	m, err := FromSource(src)
	if err != nil {
		src.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m.Path = path
	return m, nil
}

// FromSource prepares an already opened model file.
func FromSource(src weights.Source) (*Model, error) {
	em, err := exec.Load(src)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.FromMeta(src.Meta())
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if tok.VocabSize() > em.VocabSize() {
		return nil, fmt.Errorf("tokenizer has %d tokens but the model's output has %d", tok.VocabSize(), em.VocabSize())
	}
	return &Model{Src: src, Exec: em, Tok: tok}, nil
}

// Close releases the model file.
func (m *Model) Close() error { return m.Src.Close() }

// Request is one generation.
type Request struct {
	Prompt       string
	Tokens       []int32 // used instead of Prompt when set
	MaxTokens    int     // 0 = until end of generation or the context is full
	Sampling     sample.Params
	NoSpecial    bool // do not add BOS/EOS as the vocabulary asks
	ParseSpecial bool // match special-token text in the prompt
	IgnoreEOS    bool
	Truncate     bool // drop the prompt's oldest tokens when it exceeds the context
	// Constraint, when set, makes the constraint of each generation (one
	// per choice when forked): applied before every sample (constraint.go).
	Constraint func() Constraint
	// NeedLogits says the step callback reads Step.Logits (logprobs).
	// Without it a greedy decode without penalties or constraint takes
	// each token from the runner's own argmax where it has one (the CUDA
	// runner's ForwardGreedy: 4 bytes a token back, not the vocabulary's
	// logits, and no host argmax), and Step.Logits is nil for those tokens.
	NeedLogits bool
}

// Result says what a generation did.
type Result struct {
	PromptTokens []int32
	Tokens       []int32
	StopReason   string // "eos", "length", "context", "constraint" (Request.Constraint is complete)
	Reused       int    // prompt tokens whose KV the session already held (prefix cache)
	Prefilled    int    // prompt tokens computed (0 for a choice forked from another's prefill)
	Prefill      time.Duration
	Decode       time.Duration
	Drafted      int // tokens a drafter proposed (Session.Speculate)
	Accepted     int // of those, the ones generated: each saved a step
}

// Session is one sequence: its own KV cache, in a runner of its own
// (NewSession) or in a slot of an Engine's shared runner (Engine.Session),
// where its steps are batched with other sessions'. Reuse one for several
// requests; one request at a time.
type Session struct {
	m    *Model
	r    stepper
	st   *seqState    // for an engine session, its slot's
	spec *speculation // Speculate's drafter, when set
}

// seqState is what a sequence's KV cache holds: hist[i] is the token at
// position i (len(hist) == the runner's position whenever no step runs).
type seqState struct {
	hist []int32
}

// batched is a stepper that batches its steps with other sessions'.
type batched interface {
	begin()
	end()
}

// greedyStepper is a runner that takes a greedy step's argmax itself
// where Greedy says so: Forward's tokens, returning the least id of the
// largest logit.
type greedyStepper interface {
	Greedy() bool
	ForwardGreedy(tokens []int32) (int32, error)
}

// stepper is what a session needs of the runner under it.
type stepper interface {
	Forward(tokens []int32) ([]float32, error)
	Truncate(n int)
	Pos() int
	Context() int
	Close()
}

// NewSession plans the model for one sequence.
func (m *Model) NewSession(opt exec.Options) (*Session, error) {
	r, err := exec.NewRunner(m.Exec, opt)
	if err != nil {
		return nil, err
	}
	return &Session{m: m, r: r, st: &seqState{}}, nil
}

// NewSessionOn plans the model for one sequence on the device a -devices
// value names (cpu, cuda, cuda:N, auto, or a list that runtime/sched
// splits the model over).
func (m *Model) NewSessionOn(device string, opt exec.Options) (*Session, error) {
	r, _, err := devices.NewRunner(m.Exec, device, opt)
	if err != nil {
		return nil, err
	}
	return &Session{m: m, r: r, st: &seqState{}}, nil
}

// Share returns a new session for a sequence of its own on s's device that
// holds s's weights in common with it, not a copy (a GPU runner's
// gpuexec.Runner.Share: the server's sessions of one model), or an error
// where s's runner cannot share (the CPU's and split runners: make one with
// NewSessionOn).
func (s *Session) Share() (*Session, error) {
	sr, ok := s.r.(sharer)
	if !ok {
		return nil, fmt.Errorf("a %T does not share its weights", s.r)
	}
	r, err := sr.Share()
	if err != nil {
		return nil, err
	}
	return &Session{m: s.m, r: r, st: &seqState{}}, nil
}

// sharer is a runner that makes runners sharing its weights.
type sharer interface {
	Share() (*gpuexec.Runner, error)
}

// Close stops the session's workers.
func (s *Session) Close() { s.r.Close() }

// Context is the session's KV cache capacity in positions.
func (s *Session) Context() int { return s.r.Context() }

// ErrContext is returned for prompts that do not fit the context.
var ErrContext = errors.New("prompt does not fit the context")

// Generate runs req, calling emit with each piece of text as soon as it is
// complete UTF-8. emit returning an error stops it. The prompt's longest
// prefix that the session's cache already holds is not computed again:
// those KV rows are the numbers a prefill computes (bit for bit when they
// came from a prefill; positions that were decoded one row a step differ
// by the rounding that separates llama.cpp's one-row and batch kernels).
func (s *Session) Generate(ctx context.Context, req Request, emit func(string) error) (*Result, error) {
	return s.GenerateSteps(ctx, req, StepOptions{}, func(st Step) error {
		if st.Text == "" {
			return nil
		}
		return emit(st.Text)
	})
}

// Step is one generated token as GenerateSteps reports it.
type Step struct {
	// Token is the chosen id; -1 for the final call that only carries the
	// text the detokenizer held back (Flush).
	Token int32
	// Logits are the raw (unpenalized) logits Token was sampled from. They
	// belong to the runner and are valid only during the callback; nil
	// where the runner chose Token itself (Request.NeedLogits).
	Logits []float32
	// Text is the text this token completed (empty while a UTF-8
	// sequence is still incomplete).
	Text string
}

// StepOptions adjust GenerateSteps.
type StepOptions struct {
	// GeneratedPenaltiesOnly keeps prompt tokens out of the penalty
	// history, as OpenAI's frequency and presence penalties count only
	// generated tokens.
	GeneratedPenaltiesOnly bool
}

// GenerateSteps is Generate reporting every step: the chosen token, the
// logits it was drawn from and the text it completed. An end-of-generation
// token that stops the generation is not reported. step returning an error
// stops it, and that error is returned. The session keeps the KV of what it
// ran: the next request reuses the longest prefix it shares with it.
func (s *Session) GenerateSteps(ctx context.Context, req Request, opt StepOptions, step func(Step) error) (*Result, error) {
	if b, ok := s.r.(batched); ok { // tell a batching engine whom to wait for
		b.begin()
		defer b.end()
	}
	ids, err := s.promptIDs(req)
	if err != nil {
		return nil, err
	}
	sm, err := s.newSampler(req.Sampling, ids, opt)
	if err != nil {
		return nil, err
	}
	res := &Result{PromptTokens: ids}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	start := time.Now()
	logits, err := s.prefill(ids, res)
	if err != nil {
		return nil, err
	}
	res.Prefill = time.Since(start)
	return s.decode(ctx, req, sm, logits, res, step)
}

// promptIDs tokenizes req and checks it against the context.
func (s *Session) promptIDs(req Request) ([]int32, error) {
	ids := req.Tokens
	if ids == nil {
		var err error
		ids, err = s.m.Tok.Encode(req.Prompt, !req.NoSpecial, req.ParseSpecial)
		if err != nil {
			return nil, err
		}
	}
	if len(ids) == 0 {
		return nil, errors.New("the prompt is empty (and the vocabulary adds no BOS)")
	}
	limit := s.r.Context()
	if len(ids) >= limit {
		if !req.Truncate {
			return nil, fmt.Errorf("%w: %d prompt tokens, context of %d (use a larger context or allow truncation)", ErrContext, len(ids), limit)
		}
		ids = ids[len(ids)-limit/2:]
	}
	return ids, nil
}

// newSampler makes the sampler of one generation of prompt ids.
func (s *Session) newSampler(p sample.Params, ids []int32, opt StepOptions) (*sample.Sampler, error) {
	sm, err := sample.New(p, s.m.Exec.VocabSize())
	if err != nil {
		return nil, err
	}
	if !opt.GeneratedPenaltiesOnly {
		for _, t := range ids {
			sm.Accept(t)
		}
	}
	return sm, nil
}

// prefill brings the cache to ids and returns the last one's logits,
// keeping the longest prefix of ids the cache already holds (at least the
// last token is fed again: its logits are not kept).
func (s *Session) prefill(ids []int32, res *Result) ([]float32, error) {
	if s.r.Pos() != len(s.st.hist) { // the runner moved without the session: trust nothing
		s.st.hist = s.st.hist[:0]
		s.r.Truncate(0)
	}
	keep := commonPrefix(s.st.hist, ids)
	if keep == len(ids) {
		keep--
	}
	s.truncate(keep)
	logits, err := s.r.Forward(ids[keep:])
	if err != nil {
		s.truncate(0) // a failed multi-chunk prefill leaves positions it did not record
		return nil, err
	}
	s.st.hist = append(s.st.hist, ids[keep:]...)
	res.Reused, res.Prefilled = keep, len(ids)-keep
	return logits, nil
}

// decode samples from logits on and feeds each token back until a stop;
// with a drafter (Speculate) it checks drafted tokens several a step.
func (s *Session) decode(ctx context.Context, req Request, sm *sample.Sampler, logits []float32, res *Result, step func(Step) error) (*Result, error) {
	start := time.Now()
	defer func() { res.Decode = time.Since(start) }()
	d := &decoding{s: s, req: req, sm: sm, con: newConstrained(req, len(logits)), res: res,
		stream: s.m.Tok.NewContinuation(), step: step, limit: s.r.Context()}
	var err error
	if rf, ok := s.r.(rowsForwarder); ok && s.spec != nil {
		err = d.speculative(ctx, rf, logits)
	} else {
		err = d.plain(ctx, logits)
	}
	if err != nil {
		return res, err
	}
	if text := d.stream.Flush(); text != "" {
		if err := step(Step{Token: -1, Text: text}); err != nil {
			return res, err
		}
	}
	return res, nil
}

// decoding is one generation's decode: what chooses, reports and stops it.
type decoding struct {
	s      *Session
	req    Request
	sm     *sample.Sampler
	con    *constrained
	res    *Result
	stream *tokenizer.Stream
	step   func(Step) error
	limit  int
}

// emit takes tok, chosen from logits (nil where the runner chose it) with
// fed positions in the cache, as the next token: it reports it and says
// why the generation stops after it ("" to go on). An end-of-generation
// token that stops is not reported.
func (d *decoding) emit(tok int32, logits []float32, fed int) (string, error) {
	if d.s.m.Tok.IsEOG(tok) && !d.req.IgnoreEOS {
		return "eos", nil
	}
	d.res.Tokens = append(d.res.Tokens, tok)
	d.sm.Accept(tok)
	if err := d.step(Step{Token: tok, Logits: logits, Text: d.stream.Add(tok)}); err != nil {
		return "", err
	}
	switch {
	case d.con.done():
		return "constraint", nil
	case d.req.MaxTokens > 0 && len(d.res.Tokens) >= d.req.MaxTokens:
		return "length", nil
	case fed >= d.limit:
		return "context", nil
	}
	return "", nil
}

// plain feeds each token back alone.
func (d *decoding) plain(ctx context.Context, logits []float32) error {
	s := d.s
	var one [1]int32
	var err error
	greedy, _ := s.r.(greedyStepper)
	if greedy != nil && (d.req.NeedLogits || d.con != nil || !d.sm.Argmax() || !greedy.Greedy()) {
		greedy = nil
	}
	chosen := int32(-1) // the runner's argmax for this step, when it took one
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		next := chosen
		if next < 0 {
			if next, err = d.con.sample(d.sm, logits); err != nil {
				return err
			}
		}
		stop, err := d.emit(next, logits, s.r.Pos())
		if err != nil {
			return err
		}
		if stop != "" {
			d.res.StopReason = stop
			return nil
		}
		one[0] = next
		if greedy != nil {
			chosen, err = greedy.ForwardGreedy(one[:])
			logits = nil
		} else {
			logits, err = s.r.Forward(one[:])
		}
		if err != nil {
			s.truncate(0)
			return err
		}
		s.st.hist = append(s.st.hist, next)
	}
}

// truncate forgets the cache from position n on.
func (s *Session) truncate(n int) {
	s.r.Truncate(n)
	if n < len(s.st.hist) {
		s.st.hist = s.st.hist[:n]
	}
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// Cached returns the tokens whose KV the session holds, position by
// position (a copy).
func (s *Session) Cached() []int32 { return append([]int32(nil), s.st.hist...) }

// Model returns the model the session runs.
func (s *Session) Model() *Model { return s.m }
