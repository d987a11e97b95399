package exec

import (
	"runtime"
	"sync/atomic"
)

// Pool is a fixed set of worker goroutines that share one job at a time: a
// number of tasks that the workers claim one by one from an atomic counter,
// so a worker slowed by another process on the machine takes fewer of them.
// A job ends when its tasks are done, not when every woken worker has
// checked in: a worker the OS has not run yet by then skips the job, so a
// step never waits for a thread that had no CPU. It is made once per
// runner, so a step spawns no goroutines and allocates nothing.
type Pool struct {
	n    int
	wake []chan struct{} // one per worker goroutine (worker 0 is the caller)
	done chan struct{}   // the last worker out of a closed job says so

	// state is closed<<62 | the number of workers inside the current job.
	state atomic.Int64

	// The current job, written before state opens it (a worker reads state
	// before the job, so it sees the fields of the job it joins).
	task  func(t int)
	span  func(lo, hi int)
	tasks int // tasks of the job
	chunk int // span jobs: indices per task
	total int // span jobs: indices in all
	next  atomic.Int64
}

const closed = int64(1) << 62

// NewPool starts n workers (n <= 0: one per CPU).
func NewPool(n int) *Pool {
	if n <= 0 {
		n = runtime.NumCPU()
	}
	p := &Pool{n: n, wake: make([]chan struct{}, n), done: make(chan struct{}, 1)}
	p.state.Store(closed)
	for i := 1; i < n; i++ { // the caller's goroutine is worker 0
		c := make(chan struct{}, 1)
		p.wake[i] = c
		go func() {
			for range c {
				p.join()
			}
		}()
	}
	return p
}

// join enters the current job if it is still open, claims tasks until none
// is left, and leaves.
func (p *Pool) join() {
	for {
		s := p.state.Load()
		if s&closed != 0 {
			return
		}
		if p.state.CompareAndSwap(s, s+1) {
			break
		}
	}
	p.claim()
	if p.state.Add(-1) == closed {
		p.done <- struct{}{}
	}
}

// Threads is the number of workers.
func (p *Pool) Threads() int { return p.n }

// claim runs tasks of the current job until none is left.
func (p *Pool) claim() {
	for {
		t := int(p.next.Add(1) - 1)
		if t >= p.tasks {
			return
		}
		if p.task != nil {
			p.task(t)
			continue
		}
		lo := t * p.chunk
		p.span(lo, min(lo+p.chunk, p.total))
	}
}

// start runs the job set in p on up to workers workers and returns when
// every task is done.
func (p *Pool) start(workers int) {
	w := min(workers, p.n, p.tasks)
	p.next.Store(0)
	if w <= 1 {
		p.claim()
		p.task, p.span = nil, nil
		return
	}
	p.state.Store(0) // open
	for i := 1; i < w; i++ {
		select {
		case p.wake[i] <- struct{}{}:
		default: // a wake-up is already pending: the worker comes anyway
		}
	}
	p.claim()
	// Every task is claimed; close the job and wait for those inside.
	if p.state.Or(closed) != 0 {
		<-p.done
	}
	p.task, p.span = nil, nil
}

// Tasks calls fn(t) for every t in [0, tasks) on up to workers workers
// (workers <= 0: all of them) and returns when all are done.
func (p *Pool) Tasks(tasks, workers int, fn func(t int)) {
	if tasks <= 0 {
		return
	}
	if workers <= 0 {
		workers = p.n
	}
	p.task, p.span, p.tasks = fn, nil, tasks
	p.start(workers)
}

// Run calls fn over [0, total) split into ranges of at least grain indices,
// a few per worker so the split balances, and returns when all are done.
func (p *Pool) Run(total, grain int, fn func(lo, hi int)) {
	if total <= 0 {
		return
	}
	grain = max(grain, 1)
	chunk := max(grain, (total+4*p.n-1)/(4*p.n))
	if p.n == 1 || chunk >= total {
		fn(0, total)
		return
	}
	p.task, p.span, p.chunk, p.total = nil, fn, chunk, total
	p.tasks = (total + chunk - 1) / chunk
	p.start(p.n)
}

// Close stops the workers.
func (p *Pool) Close() {
	for _, c := range p.wake[1:] {
		close(c)
	}
}
