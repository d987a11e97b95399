package exec

import (
	"runtime"
	"sync"
)

// Pool is a fixed set of worker goroutines that split index ranges. It is
// made once per runner, so a step spawns no goroutines and allocates nothing.
type Pool struct {
	n    int
	work chan span
	wg   sync.WaitGroup
}

type span struct {
	fn     func(lo, hi int)
	lo, hi int
}

// NewPool starts n workers (n <= 0: one per CPU).
func NewPool(n int) *Pool {
	if n <= 0 {
		n = runtime.NumCPU()
	}
	p := &Pool{n: n, work: make(chan span, n)}
	for i := 1; i < n; i++ { // the caller's goroutine is worker 0
		go func() {
			for s := range p.work {
				s.fn(s.lo, s.hi)
				p.wg.Done()
			}
		}()
	}
	return p
}

// Threads is the number of workers.
func (p *Pool) Threads() int { return p.n }

// Run calls fn over [0, total) split into contiguous ranges, one per worker,
// and returns when all are done. grain is the smallest range worth a worker.
func (p *Pool) Run(total, grain int, fn func(lo, hi int)) {
	if total <= 0 {
		return
	}
	parts := p.n
	if grain < 1 {
		grain = 1
	}
	if m := (total + grain - 1) / grain; m < parts {
		parts = m
	}
	if parts <= 1 {
		fn(0, total)
		return
	}
	step := (total + parts - 1) / parts
	p.wg.Add(parts - 1)
	for i := 1; i < parts; i++ {
		lo := i * step
		hi := min(lo+step, total)
		if lo >= hi {
			p.wg.Done()
			continue
		}
		p.work <- span{fn, lo, hi}
	}
	fn(0, min(step, total))
	p.wg.Wait()
}

// Close stops the workers.
func (p *Pool) Close() { close(p.work) }
