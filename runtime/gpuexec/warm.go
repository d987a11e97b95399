package gpuexec

import (
	"os"
	"slices"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/ops"
)

// Warming the next weights into L2 beside the step (JITLLM_WARM=MiB, off
// by default until measured; docs/gpu.md "Warming the next weights"): a
// one-row step leaves the memory idle while its light kernels run (the
// norm-quantizers, the attention: ~19% of the 8B's step on the H200) and
// at each mat-vec's ramp, and a mat-vec under one wave (the o projection)
// streams at a third of the bandwidth. After each launch that streams a
// weight matrix, a launch on a second stream reads the first bytes of the
// next such launch's matrices (ops.ReadStream into a scratch), so they sit
// in L2 when that launch starts. Prefetching from the light kernels
// themselves was slower (stop 24: a kernel completes only when its
// prefetches land); on a stream of its own no launch of the step waits for
// the warming, and the step's graph joins it only at its end. The warming
// reads and writes nothing the step reads, so the logits are the plan's.
//
// Warming after every weight-streaming launch (JITLLM_WARM_EVERY=1) was
// slower on the H100 (stop 34: 8B 0.96 at 8 MiB, 0.85 at 32): most side
// reads run beside a mat-vec's stream or its ramp and compete with it. So
// by default a side launch warms only across an attention (a gap of light
// launches that read a KV cache and little else): the o projection's
// matrix, read into L2 while the attention's latency-bound launches leave
// the memory idle.

// warmPiece is the bytes a CTA of a warming launch reads (the read
// ceiling's best piece at these sizes, stop 24's TestGPUReadCeiling).
const warmPiece = 16 << 10

// warmBytes is JITLLM_WARM in bytes: how much of each weight-streaming
// launch's matrices is read ahead into L2 (0: off).
func warmBytes() int { return min(max(envInt("JITLLM_WARM", 0), 0), 1<<10) << 20 }

// warmEvery is JITLLM_WARM_EVERY=1: warm across every gap between
// weight-streaming launches, not only those holding an attention.
func warmEvery() bool { return os.Getenv("JITLLM_WARM_EVERY") == "1" }

// readsCache reports whether launch l reads a layer's KV cache.
func (p *plan) readsCache(l launch) bool {
	return slices.ContainsFunc(l.args, func(a any) bool {
		v, ok := a.(view)
		return ok && p.allocs[v.a].cache
	})
}

// weightViews are the views of launch l that stream stored weights: byte
// buffers the model uploads (constant), of at least a warming piece.
func (p *plan) weightViews(l launch) []view {
	var ws []view
	for _, a := range l.args {
		if v, ok := a.(view); ok && v.n >= warmPiece && p.allocs[v.a].kind == kernel.U8 && p.allocs[v.a].constant() {
			ws = append(ws, v)
		}
	}
	return ws
}

// warm puts warming launches into the one-row steps (the short and the
// long ones): after each launch that streams weights and is followed by an
// attention before the next one (every, all of them), side launches
// reading the first bytes of the next such launch's matrices, split evenly
// among them.
func (p *plan) warm(bytes int, every bool) {
	if bytes < warmPiece {
		return
	}
	k := ops.ReadStream()
	sums := -1
	warmed := func(ls []launch) []launch {
		var out []launch
		last := -1 // out's index of the last launch that streams weights
		for _, l := range ls {
			ws := p.weightViews(l)
			if len(ws) > 0 && last >= 0 && (every || slices.ContainsFunc(out[last+1:], p.readsCache)) {
				var side []launch
				for _, w := range ws {
					n := min(bytes/len(ws), w.n) / warmPiece * warmPiece
					if n == 0 {
						continue
					}
					if sums < 0 {
						sums = p.add(alloc{name: "warming sums", kind: kernel.U32, n: bytes / warmPiece})
					}
					side = append(side, launch{k: k, args: []any{view{w.a, w.off, n}, view{sums, 0, n / warmPiece}}, side: true})
				}
				out = slices.Insert(out, last+1, side...)
			}
			out = append(out, l)
			if len(ws) > 0 {
				last = len(out) - 1
			}
		}
		return out
	}
	for _, ls := range p.oneRowSteps() {
		*ls = warmed(*ls)
	}
}
