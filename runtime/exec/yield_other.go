//go:build !linux

package exec

import "runtime"

// osYield yields to other goroutines where the OS's sched_yield is not
// called (the Go scheduler still preempts a long watch).
func osYield() { runtime.Gosched() }
