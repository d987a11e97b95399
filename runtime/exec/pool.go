package exec

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Pool is a fixed set of worker goroutines that share one job at a time: a
// number of tasks that the workers claim one by one from an atomic counter,
// so a worker slowed by another process on the machine takes fewer of them.
// A job ends when its tasks are done, not when every woken worker has
// checked in: a worker the OS has not run yet by then skips the job, so a
// step never waits for a thread that had no CPU. It is made once per
// runner, so a step spawns no goroutines and allocates nothing.
//
// A worker that finishes a job watches for the next one for spinFor before
// it parks: a decode step is hundreds of jobs of tens of microseconds, and
// waking a parked goroutine (a futex wake of an idle thread, slower still
// on a VM) takes longer than that, so the caller would run most tasks
// alone (BenchmarkPoolJob). A watch that lasts past politeAfter offers the
// core to other threads at each look, so a busy machine loses nothing to it.
type Pool struct {
	n    int
	wake []chan struct{} // one per worker goroutine (worker 0 is the caller)
	done chan struct{}   // the last worker out of a closed job says so, when the caller sleeps

	// state is closed<<62 | sleeping<<61 | the number of workers inside the
	// current job; sleeping: the caller waits on done.
	state atomic.Int64

	// The current job, written before state opens it (a worker reads state
	// before the job, so it sees the fields of the job it joins).
	task  func(t int)
	span  func(lo, hi int)
	tasks int // tasks of the job
	chunk int // span jobs: indices per task
	total int // span jobs: indices in all
	next  atomic.Int64

	spin   time.Duration // how long a worker watches for a job before it parks
	seq    atomic.Int64  // jobs opened to workers: a watching worker joins each once
	width  atomic.Int64  // workers the current job may use
	parked []atomic.Bool // worker i sleeps on wake[i] (else it watches state)
}

// spinFor is how long a worker watches for a job before it parks (and
// the caller for its workers to leave a job before it sleeps).
const spinFor = 200 * time.Microsecond

const (
	closed   = int64(1) << 62
	sleeping = int64(1) << 61
)

// NewPool starts n workers (n <= 0: one per CPU).
func NewPool(n int) *Pool {
	if n <= 0 {
		n = runtime.NumCPU()
	}
	p := &Pool{n: n, wake: make([]chan struct{}, n), done: make(chan struct{}, 1), parked: make([]atomic.Bool, n)}
	p.state.Store(closed)
	if n <= runtime.GOMAXPROCS(0) {
		// With more workers than the Go scheduler runs at once, one
		// watching would hold a thread another needs for its task.
		p.spin = spinFor
	}
	for i := 1; i < n; i++ { // the caller's goroutine is worker 0
		c := make(chan struct{}, 1)
		p.wake[i] = c
		go p.work(i, c)
	}
	return p
}

// work is worker i's loop: watch for a job, else park until woken.
func (p *Pool) work(i int, wake chan struct{}) {
	var last int64 // the last job seen
	for {
		if p.watch(i, &last) {
			p.join()
			continue
		}
		// Park, then look once more: start reads parked after it opens a
		// job, so either it sees the flag and wakes this worker, or this
		// worker sees the job.
		p.parked[i].Store(true)
		if p.open(i, &last) {
			p.parked[i].Store(false)
			p.join()
			continue
		}
		if _, ok := <-wake; !ok {
			return
		}
		p.parked[i].Store(false)
		last = p.seq.Load()
		p.join()
	}
}

// open reports whether a job worker i has not seen is open to it.
func (p *Pool) open(i int, last *int64) bool {
	if p.state.Load()&closed != 0 {
		return false
	}
	s := p.seq.Load()
	if s == *last || int64(i) >= p.width.Load() {
		return false
	}
	*last = s
	return true
}

// watch spins until a job opens to worker i (true) or p.spin passes.
func (p *Pool) watch(i int, last *int64) bool {
	t0 := time.Now()
	for n := 1; ; n++ {
		if p.open(i, last) {
			return true
		}
		if n%256 == 0 {
			d := time.Since(t0)
			if d > p.spin {
				return false
			}
			// Let another goroutine of this thread's run (a second
			// model's runner, the server): the job needs no watcher.
			runtime.Gosched()
			if d > politeAfter {
				osYield()
			}
		}
	}
}

// politeAfter is how long a watch (or the caller's wait for its workers)
// runs before each look also offers the core to other threads
// (sched_yield): a decode step's gaps between jobs are shorter, so the
// steps pay nothing, while a wait that lasts (the caller descheduled by
// another process, serial work) lets that process run. Without it two
// two-thread decodes on two cores ran at 26 tok/s each against 37 with
// parked workers; with it at 37-39 (qwen3-0.6b Q8_0).
const politeAfter = 20 * time.Microsecond

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
	if p.state.Add(-1) == closed|sleeping {
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
	p.width.Store(int64(w))
	p.state.Store(0) // open
	p.seq.Add(1)
	for i := 1; i < w; i++ {
		if !p.parked[i].Load() {
			continue // watching: it sees the job
		}
		select {
		case p.wake[i] <- struct{}{}:
		default: // a wake-up is already pending: the worker comes anyway
		}
	}
	p.claim()
	// Every task is claimed; close the job and wait for those inside.
	if p.state.Or(closed) != 0 {
		p.awaitWorkers()
	}
	p.task, p.span = nil, nil
}

// awaitWorkers returns when no worker is inside the closed job: it spins
// for p.spin (a worker finishing its last task), then sleeps on done. A
// caller parked on a channel would be woken onto the finishing worker's
// own thread, which goes on watching for the next job, so the caller
// would wait for the scheduler to move it.
func (p *Pool) awaitWorkers() {
	t0 := time.Now()
	for n := 1; ; n++ {
		s := p.state.Load()
		if s == closed {
			return
		}
		if n%256 != 0 {
			continue
		}
		d := time.Since(t0)
		if d > p.spin && p.state.CompareAndSwap(s, s|sleeping) {
			<-p.done
			return
		}
		if d > politeAfter {
			osYield()
		}
	}
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
