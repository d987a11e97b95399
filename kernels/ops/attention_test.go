package ops_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
)

// The CPU backend's hand-written RoPE and attention as they were before it
// took them from kernels/ops: the Seq kernels must give their bits.

func ropeCPU(x, y []float32, rowPos []int32, freqs []float32, mode, hd, heads, dims int, ts, fs float32) {
	half := dims / 2
	for i, p := range rowPos {
		theta := float32(p)
		cs := make([]float32, dims)
		for j := 0; j < half; j++ {
			t := theta / freqs[j] * fs
			cs[2*j], cs[2*j+1] = float32(math.Cos(float64(t))), float32(math.Sin(float64(t)))
			theta *= ts
		}
		for h := 0; h < heads; h++ {
			o := (i*heads + h) * hd
			for j := 0; j < half; j++ {
				i0, i1 := o+2*j, o+2*j+1
				if mode == dsl.RopeNeox {
					i0, i1 = o+j, o+j+half
				}
				x0, x1 := x[i0], x[i1]
				y[i0] = float32(x0*cs[2*j]) - float32(x1*cs[2*j+1])
				y[i1] = float32(x0*cs[2*j+1]) + float32(x1*cs[2*j])
			}
			copy(y[o+dims:o+hd], x[o+dims:o+hd])
		}
	}
}

func f16r(x float32) float32 { return quant.F16ToF32(quant.F32ToF16(x)) }

func attentionCPU(q []float32, kc, vc []uint16, y []float32, rowPos, rowSeq []int32, hd, heads, group, dim, ctx, t0 int, scale float32) {
	for t := 0; t < len(q)/hd; t++ {
		row, h := (t0+t)/heads, (t0+t)%heads
		qh := make([]float32, hd)
		for d := range qh {
			qh[d] = f16r(q[t*hd+d])
		}
		acc := y[t*hd : (t+1)*hd]
		clear(acc)
		off := int(rowSeq[row])*ctx*dim + (h/group)*hd
		M := float32(math.Inf(-1))
		var S float32
		for j := 0; j <= int(rowPos[row]); j++ {
			s := float32(quant.DotF16AVX512Values(qh, kc[j*dim+off:j*dim+off+hd]) * scale)
			ms, vs := float32(1), float32(1)
			if s > M {
				ms = float32(math.Exp(float64(M - s)))
				M = s
				for d := range acc {
					acc[d] = f16r(acc[d] * ms)
				}
			} else {
				vs = float32(math.Exp(float64(s - M)))
			}
			for d := range acc {
				acc[d] = f16r(float32(math.FMA(float64(quant.F16ToF32(vc[j*dim+off+d])), float64(vs), float64(acc[d]))))
			}
			S = float32(S*ms) + vs
		}
		inv := 1 / S
		for d := range acc {
			acc[d] *= inv
		}
	}
}

func TestRopeSeq(t *testing.T) {
	for _, mode := range []int{dsl.RopeNormal, dsl.RopeNeox} {
		for seed := uint64(1); seed <= 6; seed++ {
			a := opstest.Args(ops.RopeSeq(mode).Name, seed)
			x, rp, fr := a[0].([]float32), a[2].([]int32), a[3].([]float32)
			hd, heads, dims, ts, fs := a[4].(int), a[5].(int), a[6].(int), a[7].(float32), a[8].(float32)
			want := make([]float32, len(x))
			ropeCPU(x, want, rp, fr, mode, hd, heads, dims, ts, fs)
			run(t, ops.RopeSeq(mode), a...)
			sameBits(t, "rope seq", a[1].([]float32), want)
			// the GPU's step form, rows at consecutive positions, is the same op
			pos := []int32{rp[0], rp[0] + 1, rp[0] + 2}
			run(t, ops.RopeSeq(mode), x, a[1], pos, fr, hd, heads, dims, ts, fs)
			z := make([]float32, len(x))
			run(t, ops.RopePos(mode, dims), x, z, []int32{0, pos[0]}, fr[:dims/2], hd, heads, ts, fs)
			sameBits(t, "rope step", z, a[1].([]float32))
		}
	}
}

func TestKVStoreSeq(t *testing.T) {
	a := opstest.Args("KVStoreSeq", 3)
	kx, vx, rp, rs, dim, ctx := a[0].([]float32), a[1].([]float32), a[4].([]int32), a[5].([]int32), a[6].(int), a[7].(int)
	kc, vc := append([]uint16(nil), a[2].([]uint16)...), append([]uint16(nil), a[3].([]uint16)...)
	for i := range rp {
		at := (int(rs[i])*ctx + int(rp[i])) * dim
		for d := 0; d < dim; d++ {
			kc[at+d], vc[at+d] = quant.F32ToF16(kx[i*dim+d]), quant.F32ToF16(vx[i*dim+d])
		}
	}
	run(t, ops.KVStoreSeq(), a...)
	for i := range kc {
		if kc[i] != a[2].([]uint16)[i] || vc[i] != a[3].([]uint16)[i] {
			t.Fatalf("[%d]: k %#x v %#x, want %#x %#x", i, a[2].([]uint16)[i], a[3].([]uint16)[i], kc[i], vc[i])
		}
	}
}

func TestAttentionSeq(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for seed := uint64(1); seed <= 12; seed++ {
		a := opstest.Args("AttentionSeq", seed)
		if seed%2 == 0 { // a large scale: the maximum moves, the rescaling runs
			a[12] = float32(4 + float32(4*r.Float32()))
		}
		q, kc, vc, rp, rs := a[0].([]float32), a[1].([]uint16), a[2].([]uint16), a[4].([]int32), a[5].([]int32)
		want := make([]float32, len(q))
		attentionCPU(q, kc, vc, want, rp, rs, a[6].(int), a[7].(int), a[8].(int), a[9].(int), a[10].(int), a[11].(int), a[12].(float32))
		run(t, ops.AttentionSeq(), a...)
		sameBits(t, "attention seq", a[3].([]float32), want)
	}
}
