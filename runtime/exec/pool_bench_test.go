package exec

import (
	"fmt"
	"testing"
)

// BenchmarkPoolJob is the cost of one two-task job on a two-worker pool
// between steps of serial work: what a decode step pays per op.
func BenchmarkPoolJob(b *testing.B) {
	for _, gap := range []int{0, 2000, 20000, 200000} {
		for _, w := range []int{1, 2} {
			b.Run(fmt.Sprintf("gap=%d/workers=%d", gap, w), func(b *testing.B) {
				p := NewPool(2)
				defer p.Close()
				var sink [2][8]int // a cache line each
				for b.Loop() {
					p.Tasks(2, w, func(t int) {
						v := sink[t][0]
						for i := 0; i < 20000; i++ {
							v += i ^ v>>3
						}
						sink[t][0] = v
					})
					v := sink[0][0]
					for i := 0; i < gap; i++ { // serial work between jobs
						v += i ^ v>>3
					}
					sink[0][0] = v
				}
			})
		}
	}
}
