package ops_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
)

// The q8_0 cache's blocks are the CPU matmul's Q8_0 activation blocks
// (quant.QuantizeRowX86: ggml's AVX2 quantize_row_q8_0), scale and quants
// split into the two arrays at each row's slot.
func TestKVStoreSeqQ8_0(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		a := opstest.Args("KVStoreSeqQ8_0", seed)
		rp, rs, dim, ctx := a[6].([]int32), a[7].([]int32), a[8].(int), a[9].(int)
		wantQ := [2][]byte{append([]byte(nil), a[2].([]byte)...), append([]byte(nil), a[3].([]byte)...)}
		wantS := [2][]uint16{append([]uint16(nil), a[4].([]uint16)...), append([]uint16(nil), a[5].([]uint16)...)}
		blk := make([]byte, 34)
		for c, x := range [2][]float32{a[0].([]float32), a[1].([]float32)} {
			for i := range rp {
				at := (int(rs[i])*ctx + int(rp[i])) * dim
				for b := 0; b < dim; b += 32 {
					if err := quant.QuantizeRowX86(quant.Q8_0, x[i*dim+b:i*dim+b+32], blk); err != nil {
						t.Fatal(err)
					}
					wantS[c][(at+b)/32] = uint16(blk[0]) | uint16(blk[1])<<8
					copy(wantQ[c][at+b:], blk[2:])
				}
			}
		}
		run(t, ops.KVStoreSeqQ8_0(), a...)
		for c := range 2 {
			for i, q := range wantQ[c] {
				if got := a[2+c].([]byte)[i]; got != q {
					t.Fatalf("seed %d cache %d quant %d: %d, want %d", seed, c, i, int8(got), int8(q))
				}
			}
			for i, s := range wantS[c] {
				if got := a[4+c].([]uint16)[i]; got != s {
					t.Fatalf("seed %d cache %d scale %d: %#x, want %#x", seed, c, i, got, s)
				}
			}
		}
	}
}

// attentionQ8CPU is ggml's flash attention loop (ggml-cpu ops.cpp, one
// chunk) over a q8_0 K and V written out in Go: Q already in K's vec-dot
// type, ggml_vec_dot_q8_0_q8_0's generic sum, V dequantized to f32 and
// accumulated in f32 with an FMA (ggml_vec_mad_f32).
func attentionQ8CPU(qq []byte, qd []float32, kq []byte, ks []uint16, vq []byte, vs []uint16, y []float32,
	rowPos, rowSeq []int32, hd, heads, group, dim, ctx, t0 int, scale float32) {
	v32 := make([]float32, hd)
	for t := 0; t < len(y)/hd; t++ {
		row, h := (t0+t)/heads, (t0+t)%heads
		acc := y[t*hd : (t+1)*hd]
		clear(acc)
		off := int(rowSeq[row])*ctx*dim + (h/group)*hd
		M := float32(math.Inf(-1))
		var S float32
		for j := 0; j <= int(rowPos[row]); j++ {
			kb := j*dim + off
			var s float32
			for b := 0; b < hd/32; b++ {
				var sumi int32
				for i := 0; i < 32; i++ {
					sumi += int32(int8(kq[kb+32*b+i])) * int32(int8(qq[t*hd+32*b+i]))
				}
				s += float32(float32(sumi) * float32(quant.F16ToF32(ks[kb/32+b])*qd[t*hd/32+b]))
			}
			s = float32(s * scale)
			Mold := M
			ms, vsc := float32(1), float32(1)
			if s > M {
				M = s
				ms = float32(math.Exp(float64(Mold - M)))
				for d := range acc {
					acc[d] = float32(acc[d] * ms)
				}
			} else {
				vsc = float32(math.Exp(float64(s - M)))
			}
			for d := range v32 {
				v32[d] = float32(float32(int8(vq[kb+d])) * quant.F16ToF32(vs[(kb+d)/32]))
			}
			for d := range acc {
				acc[d] = quant.FMA32(v32[d], vsc, acc[d])
			}
			S = float32(S*ms) + vsc
		}
		inv := 1 / S
		for d := range acc {
			acc[d] = float32(acc[d] * inv)
		}
	}
}

func TestAttentionSeqQ8_0(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for seed := uint64(1); seed <= 12; seed++ {
		a := opstest.Args("AttentionSeqQ8_0", seed)
		if seed%2 == 0 { // a large scale: the maximum moves, the rescaling runs
			a[15] = float32(2 + float32(2*r.Float32()))
		}
		y := a[6].([]float32)
		want := make([]float32, len(y))
		attentionQ8CPU(a[0].([]byte), a[1].([]float32), a[2].([]byte), a[3].([]uint16), a[4].([]byte), a[5].([]uint16), want,
			a[7].([]int32), a[8].([]int32), a[9].(int), a[10].(int), a[11].(int), a[12].(int), a[13].(int), a[14].(int), a[15].(float32))
		run(t, ops.AttentionSeqQ8_0(), a...)
		sameBits(t, "attention seq q8_0", y, want)
	}
}
