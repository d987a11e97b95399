package generate

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jitllm/jitllm/runtime/exec"
)

// Engine runs many sessions of one model through one runner with continuous
// batching: each step carries every waiting session's rows (a decode
// token, or a chunk of a prompt beside the running decodes), so the weights
// are read once per step for all of them.
type Engine struct {
	r      *exec.Runner
	vocab  int
	submit chan *slot
	wake   chan struct{} // a session ended: the loop recounts who it waits for
	quit   chan struct{}
	done   chan struct{}
	active atomic.Int32 // sessions in the middle of a generation
	steps  atomic.Int64 // batches run
	rows   atomic.Int64 // rows fed, over all batches

	mu    sync.Mutex // guards r between the loop and Truncate/Pos
	slots []*slot
	batch exec.Batch
	order []*slot // the slots whose rows the current batch carries, logits rows last
}

// slot is one sequence of the engine; Session.r for engine sessions.
type slot struct {
	e      *Engine
	seq    int32
	tokens []int32 // rows still to feed (a prompt may span several steps)
	take   int     // rows this step carries
	every  bool    // every row returns logits (ForwardRows): all its rows in one step
	out    int     // its first row among the step's logits
	logits []float32
	err    error
	ready  chan struct{}
	st     seqState

	hsum  []float64 // when set, the step adds this slot's rows of the final hidden state here
	hrows [2]int    // this step: first row and count in the rows that need no logits
}

// NewEngine plans m for sessions sequences sharing one runner; opt.MaxBatch
// bounds the rows of one step (prompt chunks fill what decodes leave).
func (m *Model) NewEngine(opt exec.Options, sessions int) (*Engine, error) {
	if sessions < 1 {
		return nil, fmt.Errorf("an engine needs at least one session, got %d", sessions)
	}
	opt.Sequences = sessions
	opt.LogitsAll = false
	r, err := exec.NewRunner(m.Exec, opt)
	if err != nil {
		return nil, err
	}
	e := &Engine{r: r, vocab: m.Exec.VocabSize(), submit: make(chan *slot, sessions), wake: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{})}
	for i := 0; i < sessions; i++ {
		e.slots = append(e.slots, &slot{e: e, seq: int32(i), logits: make([]float32, e.vocab), ready: make(chan struct{}, 1)})
	}
	go e.loop()
	return e, nil
}

// Session returns session i (0 ≤ i < sessions) of the engine.
func (e *Engine) Session(m *Model, i int) *Session {
	return &Session{m: m, r: e.slots[i], st: &e.slots[i].st}
}

// Close stops the engine; sessions must be idle.
func (e *Engine) Close() {
	close(e.quit)
	<-e.done
	e.r.Close()
}

var errEngineClosed = errors.New("the engine is closed")

// loop gathers the rows of every session in a generation and runs them as
// one batch: it waits until each active session has submitted (they do as
// soon as they have sampled) or ended, so every step carries them all.
func (e *Engine) loop() {
	defer close(e.done)
	var waiting []*slot
	for {
		for len(waiting) == 0 || len(waiting) < int(e.active.Load()) {
			select {
			case s := <-e.submit:
				waiting = append(waiting, s)
			case <-e.wake:
			case <-e.quit:
				return
			}
		}
		waiting = e.step(waiting)
	}
}

// step runs one batch over the waiting slots and returns those still
// waiting (prompts longer than the batch continue in the next step).
func (e *Engine) step(waiting []*slot) []*slot {
	budget := e.r.MaxBatch()
	b := &e.batch
	b.Tokens, b.Seq, e.order = b.Tokens[:0], b.Seq[:0], e.order[:0]
	// Decodes (one row) first so a long prompt never starves them, then
	// prompt chunks in the room left.
	for _, pass := range [2]bool{true, false} {
		for _, s := range waiting {
			if (len(s.tokens) == 1 || s.every) != pass || s.take > 0 || budget == 0 {
				continue
			}
			if s.every && len(s.tokens) > budget {
				continue // whole or not at all: the next step
			}
			s.take = min(len(s.tokens), budget)
			budget -= s.take
			e.order = append(e.order, s)
		}
	}
	// Rows that need no logits first, then each finishing slot's last row.
	logits := 0
	for _, s := range e.order {
		n := s.take
		switch {
		case s.every:
			n = 0 // all its rows go to the logits section
			logits += s.take
		case n == len(s.tokens):
			n-- // its last row goes to the logits section
			logits++
		}
		s.hrows = [2]int{len(b.Tokens), n}
		b.Tokens = append(b.Tokens, s.tokens[:n]...)
		for i := 0; i < n; i++ {
			b.Seq = append(b.Seq, s.seq)
		}
	}
	k := 0
	for _, s := range e.order {
		switch {
		case s.every:
			b.Tokens = append(b.Tokens, s.tokens...)
			for range s.tokens {
				b.Seq = append(b.Seq, s.seq)
			}
			s.out = k
			k += len(s.tokens)
		case s.take == len(s.tokens):
			b.Tokens = append(b.Tokens, s.tokens[s.take-1])
			b.Seq = append(b.Seq, s.seq)
			s.out = k
			k++
		}
	}
	b.Logits = logits
	b.Hidden = false
	for _, s := range e.order {
		b.Hidden = b.Hidden || s.hsum != nil
	}
	e.mu.Lock()
	out, err := e.r.ForwardBatch(*b)
	var herr error // fails only the slots that pool the hidden state
	if err == nil {
		herr = e.poolHidden(len(b.Tokens) - logits)
	}
	e.mu.Unlock()
	e.steps.Add(1)
	e.rows.Add(int64(len(b.Tokens)))
	next := waiting[:0]
	for _, s := range waiting {
		switch {
		case s.take == 0:
			next = append(next, s)
			continue
		case err != nil:
			s.err, s.tokens = err, nil
		case herr != nil && s.hsum != nil:
			s.err, s.tokens = herr, nil
		case s.take == len(s.tokens):
			rows := 1
			if s.every {
				rows = s.take
			}
			if len(s.logits) < rows*e.vocab {
				s.logits = make([]float32, rows*e.vocab)
			}
			copy(s.logits, out[s.out*e.vocab:(s.out+rows)*e.vocab])
			s.tokens = nil
		default:
			s.tokens = s.tokens[s.take:]
			s.take = 0
			next = append(next, s)
			continue
		}
		s.take = 0
		s.ready <- struct{}{}
	}
	return next
}

// Forward queues tokens for the slot's sequence and waits for the step that
// finishes them; the logits belong to the slot until its next Forward.
func (s *slot) Forward(tokens []int32) ([]float32, error) {
	return s.forward(tokens, false)
}

// ForwardRows is Forward returning every row's logits, the rows carried
// by one step (at most the engine's batch).
func (s *slot) ForwardRows(tokens []int32) ([]float32, error) {
	if n, b := len(tokens), s.e.r.MaxBatch(); n > b {
		return nil, fmt.Errorf("forward: %d rows exceed the batch of %d", n, b)
	}
	l, err := s.forward(tokens, true)
	if err != nil {
		return nil, err
	}
	return l[:len(tokens)*s.e.vocab], nil
}

func (s *slot) forward(tokens []int32, every bool) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, errors.New("forward: no tokens")
	}
	if p := s.Pos(); p+len(tokens) > s.Context() {
		return nil, fmt.Errorf("%d tokens at position %d exceed the context of %d positions", len(tokens), p, s.Context())
	}
	s.tokens, s.err, s.every = tokens, nil, every
	select {
	case s.e.submit <- s:
	case <-s.e.quit:
		return nil, errEngineClosed
	}
	<-s.ready
	if s.err != nil {
		return nil, s.err
	}
	return s.logits[:s.e.vocab], nil
}

func (s *slot) Truncate(n int) {
	s.e.mu.Lock()
	s.e.r.TruncateSeq(int(s.seq), n)
	s.e.mu.Unlock()
}

func (s *slot) Pos() int {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return s.e.r.SeqPos(int(s.seq))
}

func (s *slot) Context() int { return s.e.r.Context() }

// begin and end bracket a generation, so the loop knows whom to wait for.
func (s *slot) begin() { s.e.active.Add(1) }

func (s *slot) end() {
	s.e.active.Add(-1)
	select {
	case s.e.wake <- struct{}{}:
	default:
	}
}

// Close does nothing: the engine owns the runner.
func (s *slot) Close() {}

// poolHidden adds each collecting slot's rows of the step's final hidden
// state to its sum; logits0 is the first row of the logits section.
func (e *Engine) poolHidden(logits0 int) error {
	var h []float32
	var w int
	for _, s := range e.order {
		if s.hsum == nil {
			continue
		}
		if h == nil {
			var err error
			if h, w, err = e.r.Hidden(); err != nil {
				return err
			}
		}
		if len(s.hsum) != w {
			return fmt.Errorf("pooling a hidden state of width %d into %d values", w, len(s.hsum))
		}
		add := func(row int) {
			for j, v := range h[row*w : (row+1)*w] {
				s.hsum[j] += float64(v)
			}
		}
		for i := 0; i < s.hrows[1]; i++ {
			add(s.hrows[0] + i)
		}
		if s.take == len(s.tokens) {
			add(logits0 + s.out)
		}
	}
	return nil
}

// EngineStats counts an engine's work.
type EngineStats struct {
	Steps int64 // batches run
	Rows  int64 // rows fed (prompt tokens computed plus decode tokens)
}

// Stats reports the engine's work so far.
func (e *Engine) Stats() EngineStats { return EngineStats{Steps: e.steps.Load(), Rows: e.rows.Load()} }

// Sessions is the number of slots.
func (e *Engine) Sessions() int { return len(e.slots) }

// Context is each slot's KV capacity in positions.
func (e *Engine) Context() int { return e.r.Context() }

// KVLayout is what one cached position holds; its BytesPerToken prices a
// request's KV.
func (e *Engine) KVLayout() exec.KVLayout { return e.r.KVLayout() }

// KVBytes is the KV memory the engine holds (every slot's full context).
func (e *Engine) KVBytes() int64 { return e.r.KVBytes() }
