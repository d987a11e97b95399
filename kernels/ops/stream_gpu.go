package ops

import k "github.com/jitllm/jitllm/dsl/kernel"

// StreamThreads is the CTA that reads one piece of ReadStream's buffer.
const StreamThreads = 256

// ReadStream is ReadStream(w []byte, y []uint32): the buffer cut into
// len(y) pieces of whole 16-byte chunks (the bytes past the last whole
// piece unread), y[r] the wrapping sum of piece r's little-endian words.
// It measures the device's read bandwidth (a decode step streams its
// weights once; runtime/gpuexec's ReadBandwidth): a CTA of StreamThreads a
// piece, each thread four chunks a trip, one 16-byte load each.
func ReadStream() *k.Kernel {
	b := k.New("ReadStream")
	b.Doc("sums each of len(y) equal pieces of w (whole 16-byte chunks) as wrapping u32 words into y.")
	w, y := b.Buffer("w", k.U8), b.Buffer("y", k.U32)
	chunks := b.Let("chunks", w.Len().Div(y.Len()).Div(16))
	b.ParallelFor("r", 0, y.Len(), func(r k.Expr) {
		base := b.Let("base", r.Mul(chunks).Mul(16))
		sum := b.Sum("sum", k.U32, 0, chunks, func(u k.Expr) k.Expr {
			c := b.View("c", w, base.Add(u.Mul(16)), 16)
			return c.Aligned(k.U32, 0).Add(c.Aligned(k.U32, 4)).Add(c.Aligned(k.U32, 8)).Add(c.Aligned(k.U32, 12))
		})
		b.Store(y, r, sum)
	})
	b.Schedule("sum_i", k.LoopSchedule{Threads: StreamThreads, Unroll: 4})
	return b.MustBuild()
}
