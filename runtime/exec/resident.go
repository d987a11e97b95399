package exec

import (
	"runtime"
	"sync"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/runtime/hostmem"
	"github.com/jitllm/jitllm/runtime/mmap"
)

// residency records which of a model's weights a CPU runner has planned
// over (copied out of the file's mapping or not); a model and its stages
// share one. A settled weight is never moved again: another runner may be
// reading it.
type residency struct {
	mu      sync.Mutex
	settled []bool // by weight index
}

// availableMemory is the RAM free for new allocations (a variable so tests
// can pretend a small machine).
var availableMemory = func() uint64 { _, avail, _ := hostmem.Read(); return avail }

// arenaAlign aligns each copied weight to a cache line.
const arenaAlign = 64

// residentShare is the most of the available memory the copies may take:
// the rest stays for the KV cache, the page cache and other processes.
const residentShare = 2

// settle copies the weights the runner's matmuls stream into memory
// (unless mapped is set), when together they fit in 1/residentShare of the
// available memory, and reports whether it did; either way they are
// settled. Weights read from a file's mapping come from the page cache,
// whose pages the kernel scatters over physical memory: on
// the 2-core EPYC host a decode mat-vec streamed them at 19 GB/s a thread
// against 29 GB/s from a fresh allocation, and llama-3.2-1b Q4_K_M decoded
// at 22-27 tok/s mapped and 37-40 copied (llama.cpp's --no-mmap does the
// same). A model too large for the copy stays mapped and is paged from disk.
// The copy holds the same bytes, so results do not change.
func (m *Model) settle(mapped bool) bool {
	if m.res == nil {
		return false
	}
	m.res.mu.Lock()
	defer m.res.mu.Unlock()
	var need uint64
	var ids []int // this runner's matmul weights no runner has settled yet
	for _, n := range m.Graph.Nodes {
		if n.Op != dsl.OpMatMul || m.res.settled[n.Weight] {
			continue
		}
		m.res.settled[n.Weight] = true // copied below or left mapped, for good
		ids = append(ids, n.Weight)
		need += uint64(len(m.Weights[n.Weight].Data))
	}
	var arena []byte
	if !mapped && len(ids) > 0 && need <= availableMemory()/residentShare {
		// one anonymous mapping on huge pages for all of them (mmap.Anon:
		// 4 KiB page faults made a 600 MB copy take seconds), released
		// when no model holding the residency is left
		arena, _ = mmap.Anon(int(need) + len(ids)*arenaAlign)
		if arena != nil {
			runtime.AddCleanup(m.res, mmap.Unmap, arena)
		}
	}
	if arena == nil {
		return false
	}
	off := 0
	for _, i := range ids {
		w := &m.Weights[i]
		b := arena[off : off+len(w.Data) : off+len(w.Data)]
		copy(b, w.Data)
		w.Data = b
		off = (off + len(b) + arenaAlign - 1) / arenaAlign * arenaAlign
	}
	return true
}
