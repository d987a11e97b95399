package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/generate"
)

var (
	errQueueFull = errors.New("too many requests are waiting for this model")
	errBusy      = errors.New("no session became free in time")
	errClosed    = errors.New("the model is being unloaded or the server is shutting down")
)

// pool hands out at most max sessions of one model. The sessions are slots
// of one continuous-batching engine, so concurrent requests share each
// step's weight reads; the engine is made on first need. Callers beyond max
// wait (at most maxQueue of them, each at most wait).
type pool struct {
	id       string
	m        *generate.Model
	opt      exec.Options
	engine   *generate.Engine
	max      int
	sem      chan struct{}
	wait     time.Duration
	maxQueue int
	met      *metrics
	device   string              // "cuda": slots are sessions of their own (own), made by start
	lookup   int                 // engine sessions draft by prompt lookup of n-grams up to this long (0: no speculation)
	draftMax int                 // ... this many tokens a step
	own      []*generate.Session // sessions the pool made and closes
	done     chan struct{}       // closed by close: wakes the queued callers

	mu      sync.Mutex
	idle    []*generate.Session
	waiting int
	closed  bool

	// KV accounting (kv bytes are positions × kvTok, the engine's bytes per
	// position): what each session in use reserved, and when each idle
	// slot was last given back (the oldest is handed out first, so the
	// recently used prefixes stay cached longest).
	kvTok  int64
	held   map[*generate.Session]int64
	kvHeld int64
	used   map[*generate.Session]int64
	clock  int64

	// Snapshots of prompt prefixes that requests shared (system prompts),
	// most recently used first: they outlive the slots that held them.
	hot      []*generate.Snapshot
	hotBytes int64
}

// The hot-prefix cache: at most maxHot snapshots, together at most one
// slot's KV; a prefix is kept once a request reused at least minHot tokens.
const (
	maxHot = 8
	minHot = 16
)

func newPool(id string, m *generate.Model, opt exec.Options, max, maxQueue int, wait time.Duration, met *metrics) *pool {
	met.sessionsMax.WithLabelValues(id).Set(float64(max))
	met.queue.WithLabelValues(id).Set(0)
	met.inUse.WithLabelValues(id).Set(0)
	return &pool{id: id, m: m, opt: opt, max: max, sem: make(chan struct{}, max), wait: wait, maxQueue: maxQueue, met: met, done: make(chan struct{})}
}

// acquire returns a session for the caller's exclusive use; give it back
// with release.
func (p *pool) acquire(ctx context.Context) (*generate.Session, error) {
	select {
	case p.sem <- struct{}{}:
	default:
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, errClosed
		}
		if p.waiting >= p.maxQueue {
			p.mu.Unlock()
			return nil, errQueueFull
		}
		p.waiting++
		p.met.queue.WithLabelValues(p.id).Set(float64(p.waiting))
		p.mu.Unlock()
		t := time.NewTimer(p.wait)
		var err error
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			err = ctx.Err()
		case <-p.done:
			err = errClosed
		case <-t.C:
			err = errBusy
		}
		t.Stop()
		p.mu.Lock()
		p.waiting--
		p.met.queue.WithLabelValues(p.id).Set(float64(p.waiting))
		p.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.sem
		return nil, errClosed
	}
	if p.engine == nil && p.device != "cuda" {
		e, err := p.m.NewEngine(p.opt, p.max)
		if err != nil {
			p.mu.Unlock()
			<-p.sem
			return nil, err
		}
		p.engine = e
		for i := p.max - 1; i >= 0; i-- {
			s := e.Session(p.m, i)
			if err := p.speculate(s); err != nil {
				p.mu.Unlock()
				<-p.sem
				return nil, err
			}
			p.idle = append(p.idle, s)
		}
	}
	// A slot is free whenever the semaphore let us in. It reserves a
	// whole context until the request says what it needs (reserve).
	s := p.takeIdle()
	p.reserveLocked(s, p.context())
	p.mu.Unlock()
	p.met.inUse.WithLabelValues(p.id).Inc()
	return s, nil
}

// speculate gives a slot the pool's drafter: prompt lookup of n-grams up to
// p.lookup long, p.draftMax tokens a step (none without lookup).
func (p *pool) speculate(s *generate.Session) error {
	if p.lookup <= 0 {
		return nil
	}
	return s.Speculate(generate.LookupDrafter{MinN: 1, MaxN: p.lookup}, p.draftMax)
}

func (p *pool) release(s *generate.Session) {
	p.mu.Lock()
	p.idle = append(p.idle, s)
	p.reserveLocked(s, 0)
	p.clock++
	if p.used == nil {
		p.used = map[*generate.Session]int64{}
	}
	p.used[s] = p.clock
	p.reportKV()
	p.mu.Unlock()
	p.met.inUse.WithLabelValues(p.id).Dec()
	<-p.sem
}

// takeIdle removes and returns the idle slot given back longest ago.
func (p *pool) takeIdle() *generate.Session {
	best := 0
	for i, s := range p.idle {
		if p.used[s] < p.used[p.idle[best]] {
			best = i
		}
	}
	s := p.idle[best]
	p.idle = append(p.idle[:best], p.idle[best+1:]...)
	return s
}

// reserveLocked sets the KV a session in use holds to tokens positions.
func (p *pool) reserveLocked(s *generate.Session, tokens int) {
	if p.engine != nil && p.kvTok == 0 {
		p.kvTok = int64(p.engine.KVLayout().BytesPerToken())
	}
	if p.held == nil {
		p.held = map[*generate.Session]int64{}
	}
	p.kvHeld -= p.held[s]
	delete(p.held, s)
	if tokens > 0 {
		p.held[s] = int64(tokens) * p.kvTok
		p.kvHeld += p.held[s]
	}
	p.reportKV()
}

// reserve records the KV positions a request on s needs (prompt plus
// max_tokens, at most the context); it lowers acquire's whole context.
func (p *pool) reserve(s *generate.Session, tokens int) {
	p.mu.Lock()
	p.reserveLocked(s, tokens)
	p.mu.Unlock()
}

// kvCapacity is the KV memory of the pool's engine: every slot's context.
func (p *pool) kvCapacity() int64 { return p.kvTok * int64(p.context()) * int64(p.max) }

// tryExtra takes up to n more idle slots without waiting, each reserving
// tokens positions, as long as a slot is free and the engine's free KV
// covers it: the slots of the other choices of an n-choice request. Give
// them back with release.
func (p *pool) tryExtra(n, tokens int) []*generate.Session {
	var out []*generate.Session
	for len(out) < n {
		select {
		case p.sem <- struct{}{}:
		default:
			return out
		}
		p.mu.Lock()
		// Queued requests come first: extra choices only use slots nobody waits for.
		if p.closed || p.engine == nil || len(p.idle) == 0 || p.waiting > 0 || p.kvHeld+int64(tokens)*p.kvTok > p.kvCapacity() {
			p.mu.Unlock()
			<-p.sem
			return out
		}
		s := p.takeIdle()
		p.reserveLocked(s, tokens)
		p.mu.Unlock()
		p.met.inUse.WithLabelValues(p.id).Inc()
		out = append(out, s)
	}
	return out
}

// warm gives sess the longest prefix of ids that an idle slot holds, when
// it is longer than what sess holds itself (a KV copy in place of a
// prefill: llama.cpp server's cache_prompt, across slots).
func (p *pool) warm(sess *generate.Session, ids []int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	own := sess.CommonPrefix(ids)
	var best *generate.Session
	n := own
	for _, s := range p.idle {
		if k := s.CommonPrefix(ids); k > n {
			best, n = s, k
		}
	}
	if best == nil || p.engine == nil {
		return
	}
	// The idle slot cannot be taken while the pool's lock is held.
	if err := sess.CopyPrefix(best, n); err != nil {
		return // not slots of one engine (a named session of another): prefill instead
	}
	if p.used != nil {
		p.clock++
		p.used[best] = p.clock // its prefix is hot: keep it
	}
}

// fromHot restores into sess the hot prefix snapshot sharing the longest
// prefix with ids, when it is longer than what sess holds.
func (p *pool) fromHot(sess *generate.Session, ids []int32) {
	p.mu.Lock()
	own := sess.CommonPrefix(ids)
	best, n := -1, own
	for i, h := range p.hot {
		if k := h.CommonPrefix(ids); k > n {
			best, n = i, k
		}
	}
	if best < 0 {
		p.mu.Unlock()
		return
	}
	h := p.hot[best]
	copy(p.hot[1:best+1], p.hot[:best]) // most recently used first
	p.hot[0] = h
	p.mu.Unlock()
	if n < len(h.Tokens) {
		var err error
		if h, err = h.Prefix(n); err != nil {
			return
		}
	}
	sess.Restore(h) // a failure leaves an empty cache: the request prefills
}

// noteHot keeps the first reused positions of sess (a prefix of ids that a
// request found cached) as a hot prefix, unless one already covers it.
func (p *pool) noteHot(sess *generate.Session, ids []int32, reused int) {
	if reused < minHot || p.kvTok == 0 || reused > len(ids) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, h := range p.hot {
		if h.CommonPrefix(ids[:reused]) == reused {
			copy(p.hot[1:i+1], p.hot[:i])
			p.hot[0] = h
			return
		}
	}
	limit := p.kvTok * int64(p.context())
	snap, err := sess.SnapshotPrefix(reused)
	if err != nil || snap.Bytes() > limit {
		return
	}
	p.hot = append([]*generate.Snapshot{snap}, p.hot...)
	p.hotBytes += snap.Bytes()
	for len(p.hot) > maxHot || p.hotBytes > limit {
		last := p.hot[len(p.hot)-1]
		p.hot = p.hot[:len(p.hot)-1]
		p.hotBytes -= last.Bytes()
	}
	p.reportKV()
}

// reportKV updates the KV gauges; p.mu is held.
func (p *pool) reportKV() {
	var cached int64
	for _, s := range p.idle {
		cached += int64(s.CachedLen()) * p.kvTok
	}
	p.met.kvCapacity.WithLabelValues(p.id).Set(float64(p.kvCapacity()))
	p.met.kvReserved.WithLabelValues(p.id).Set(float64(p.kvHeld))
	p.met.kvCached.WithLabelValues(p.id).Set(float64(cached))
	p.met.kvHot.WithLabelValues(p.id).Set(float64(p.hotBytes))
}

// close refuses new callers, waits for the sessions in use (or ctx), and
// closes the idle ones.
func (p *pool) close(ctx context.Context) error {
	p.mu.Lock()
	if !p.closed {
		close(p.done)
	}
	p.closed = true
	p.mu.Unlock()
	// Take every slot: then no session is in use.
	var err error
	for i := 0; i < cap(p.sem); i++ {
		select {
		case p.sem <- struct{}{}:
			continue
		default:
		}
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			break
		}
	}
	p.mu.Lock()
	if err == nil && p.engine != nil {
		p.engine.Close()
		p.engine = nil
	}
	if err == nil {
		for _, s := range p.own {
			s.Close()
		}
		p.own = nil
	}
	p.idle = nil
	p.mu.Unlock()
	return err
}

// context is the KV length a session of this pool has.
func (p *pool) context() int {
	if p.opt.Context > 0 {
		return p.opt.Context
	}
	n := p.m.Exec.ContextLength()
	if n <= 0 || n > 4096 {
		n = 4096
	}
	return n
}
