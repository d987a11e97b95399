package exec

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// Every task of every job runs exactly once, whatever the worker count,
// including jobs a late worker joins or skips; Run covers its range once.
func TestPoolRunsEveryTaskOnce(t *testing.T) {
	for _, n := range []int{1, 2, 3, 8} {
		p := NewPool(n)
		r := rand.New(rand.NewPCG(uint64(n), 1))
		hits := make([]atomic.Int32, 500)
		for job := 0; job < 2000; job++ {
			tasks := 1 + r.IntN(len(hits))
			// A slow task makes the caller wait for a worker (longer than
			// spinFor: it sleeps); a pause between jobs parks the workers.
			slow := job%97 == 0
			if job%89 == 0 {
				time.Sleep(2 * spinFor)
			}
			p.Tasks(tasks, r.IntN(n+2), func(i int) {
				if slow && i == tasks-1 {
					time.Sleep(2 * spinFor)
				}
				hits[i].Add(1)
			})
			for i := range hits {
				want := int32(0)
				if i < tasks {
					want = 1
				}
				if got := hits[i].Swap(0); got != want {
					t.Fatalf("n=%d job %d: task %d of %d ran %d times", n, job, i, tasks, got)
				}
			}
			total := r.IntN(3 * len(hits))
			p.Run(total, 1+r.IntN(8), func(lo, hi int) {
				for i := lo; i < hi; i++ {
					hits[i%len(hits)].Add(1)
				}
			})
			var sum int32
			for i := range hits {
				sum += hits[i].Swap(0)
			}
			if int(sum) != total {
				t.Fatalf("n=%d: Run covered %d of %d", n, sum, total)
			}
		}
		p.Close()
	}
}
