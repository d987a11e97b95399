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
	errClosed    = errors.New("the server is shutting down")
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

	mu      sync.Mutex
	idle    []*generate.Session
	waiting int
	closed  bool
}

func newPool(id string, m *generate.Model, opt exec.Options, max, maxQueue int, wait time.Duration, met *metrics) *pool {
	met.sessionsMax.WithLabelValues(id).Set(float64(max))
	met.queue.WithLabelValues(id).Set(0)
	met.inUse.WithLabelValues(id).Set(0)
	return &pool{id: id, m: m, opt: opt, max: max, sem: make(chan struct{}, max), wait: wait, maxQueue: maxQueue, met: met}
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
	if p.engine == nil {
		e, err := p.m.NewEngine(p.opt, p.max)
		if err != nil {
			p.mu.Unlock()
			<-p.sem
			return nil, err
		}
		p.engine = e
		for i := p.max - 1; i >= 0; i-- {
			p.idle = append(p.idle, e.Session(p.m, i))
		}
	}
	// A slot is free whenever the semaphore let us in.
	s := p.idle[len(p.idle)-1]
	p.idle = p.idle[:len(p.idle)-1]
	p.mu.Unlock()
	p.met.inUse.WithLabelValues(p.id).Inc()
	return s, nil
}

func (p *pool) release(s *generate.Session) {
	p.mu.Lock()
	p.idle = append(p.idle, s)
	p.mu.Unlock()
	p.met.inUse.WithLabelValues(p.id).Dec()
	<-p.sem
}

// close refuses new callers, waits for the sessions in use (or ctx), and
// closes the idle ones.
func (p *pool) close(ctx context.Context) error {
	p.mu.Lock()
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
