package kquant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/kernels/cpukern"
	"github.com/jitllm/jitllm/kernels/ops"
)

// byISA is the kernel of order registered for isa.
func byISA(order, isa string) (cpukern.Kernel, bool) {
	for _, k := range cpukern.All(order) {
		if k.ISA == isa {
			return k, true
		}
	}
	return cpukern.Kernel{}, false
}

// extremeWeights is nb blocks of d, each filled with one byte (0x00:
// zero scales and quants; 0xff: the largest quants and scale bits) and f16
// scales set to h (where h is not 0xffff, which keeps the fill).
func extremeWeights(d ops.BlockDecode, nb int, fill byte, h uint16) []byte {
	w := make([]byte, nb*d.Bytes)
	for i := range w {
		w[i] = fill
	}
	if h != 0xffff {
		for b := 0; b < nb; b++ {
			for _, off := range d.F16 {
				binary.LittleEndian.PutUint16(w[b*d.Bytes+off:], h)
			}
		}
	}
	return w
}

// extremeActivations is a Q8_K row of quants q (bsums consistent) and scale d.
func extremeActivations(n int, q byte, d float32) []byte {
	x := make([]byte, n/qk*q8kBytes)
	for b := 0; b < n/qk; b++ {
		blk := x[b*q8kBytes : (b+1)*q8kBytes]
		binary.LittleEndian.PutUint32(blk, math.Float32bits(d))
		for j := 4; j < 260; j++ {
			blk[j] = q
		}
		fixBsums(blk)
	}
	return x
}

// TestAVXVNNIMatchesAVX2 holds the AVX-VNNI kernels (VEX VPDPWSSD in place
// of VPMADDWD+VPADDD) to the AVX2 ones bit for bit, with no excuse (both
// round on the same hardware), and to the Go path, on random, zero and
// extreme blocks: Dot, every element of the 1×8 Tile, and Rows.
func TestAVXVNNIMatchesAVX2(t *testing.T) {
	for _, o := range orders {
		v, ok := byISA(o.name, "avxvnni")
		if !ok {
			t.Skipf("no avxvnni %s: this CPU lacks AVX-VNNI (cpuid AVXVNNI) or is not amd64", o.name)
		}
		a, ok := byISA(o.name, "avx2")
		if !ok {
			t.Fatalf("%s: avxvnni registered without avx2", o.name)
		}
		t.Run(o.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, uint64(len(o.name))))
			type pair struct {
				what string
				w, x []byte
			}
			for _, n := range []int{256, 512, 768, 1024, 1280, 2048, 3072, 4096, 5120, 8192 + 256} {
				nb := n / qk
				cases := []pair{
					{"zero weights", extremeWeights(o.blk, nb, 0, 0xffff), activations(n, r)},
					{"zero activations", weights(o.blk, nb, r), extremeActivations(n, 0, 1)},
					{"max quants, -128", extremeWeights(o.blk, nb, 0xff, 0x3c00), extremeActivations(n, 0x80, 1)},
					{"max quants, 127", extremeWeights(o.blk, nb, 0xff, 0x7bff), extremeActivations(n, 0x7f, 3e30)},
					{"max quants, -128, tiny", extremeWeights(o.blk, nb, 0xff, 0x0001), extremeActivations(n, 0x80, 1e-30)},
				}
				for rep := 0; rep < 6; rep++ {
					cases = append(cases, pair{fmt.Sprintf("random %d", rep), weights(o.blk, nb, r), activations(n, r)})
				}
				for _, c := range cases {
					got, want := v.Dot(n, c.w, c.x), a.Dot(n, c.w, c.x)
					if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
						t.Fatalf("n=%d %s: avxvnni %v (%#x), avx2 %v (%#x)", n, c.what, got, math.Float32bits(got), want, math.Float32bits(want))
					}
					agree(t, o.name, n, c.w, c.x, got, c.what)
				}
				// the 1×8 tile over the cases' activation rows, and Rows over
				// their weight rows
				rows := min(len(cases), 8)
				x := make([]byte, 8*nb*q8kBytes)
				for i := 0; i < 8; i++ {
					copy(x[i*nb*q8kBytes:], cases[i%rows].x)
				}
				w := cases[len(cases)-1].w
				var tv, ta [8]float32
				v.Tile(n, w, nb*o.blk.Bytes, x, nb*q8kBytes, tv[:], 1)
				a.Tile(n, w, nb*o.blk.Bytes, x, nb*q8kBytes, ta[:], 1)
				ws := make([]byte, 0, len(cases)*nb*o.blk.Bytes)
				for _, c := range cases {
					ws = append(ws, c.w...)
				}
				rv, ra := make([]float32, len(cases)), make([]float32, len(cases))
				v.Rows(n, ws, nb*o.blk.Bytes, cases[0].x, rv, cpukern.DefaultPrefetch)
				a.Rows(n, ws, nb*o.blk.Bytes, cases[0].x, ra, cpukern.DefaultPrefetch)
				for i := range tv {
					if !sameBits(tv[i], ta[i]) {
						t.Fatalf("n=%d tile out[%d]: avxvnni %v, avx2 %v", n, i, tv[i], ta[i])
					}
				}
				for j := range rv {
					if !sameBits(rv[j], ra[j]) {
						t.Fatalf("n=%d rows out[%d]: avxvnni %v, avx2 %v", n, j, rv[j], ra[j])
					}
				}
			}
		})
	}
}

// TestVEXOnly checks the generated assembly: the AVX2 and AVX-VNNI kernels
// must run on CPUs without AVX-512, so they may name no Z register and no
// X/Y16-31 (the Go assembler would give such instructions EVEX encodings),
// and the AVX-VNNI ones carry VPDPWSSD only as VEX bytes (Go spells its
// mnemonic only in the EVEX form).
func TestVEXOnly(t *testing.T) {
	src, err := os.ReadFile("zz_kquant_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	high := regexp.MustCompile(`\b(Z\d+|[XY](1[6-9]|2\d|3[01]))\b`)
	var name string
	vex := map[string]int{}
	for _, l := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(l, "TEXT ") {
			name = strings.Fields(l)[1]
			continue
		}
		if !strings.Contains(name, "AVX2(") && !strings.Contains(name, "AVXVNNI(") {
			continue
		}
		code, _, _ := strings.Cut(l, "//")
		if m := high.FindString(code); m != "" {
			t.Errorf("%s uses %s, which needs AVX-512: %s", name, m, strings.TrimSpace(l))
		}
		if strings.Contains(code, "VPDP") {
			t.Errorf("%s: an EVEX-only mnemonic: %s", name, strings.TrimSpace(l))
		}
		if strings.Contains(l, "// VPDPWSSD Y") && strings.HasPrefix(strings.TrimSpace(code), "BYTE") {
			vex[name]++
		}
	}
	for _, f := range []string{"q4kDot1", "q4kDot8", "q5kDot1", "q5kDot8", "q6kDot1", "q6kDot8", "q4kr8Dot1", "q4kr8Dot8",
		"q4kRows", "q5kRows", "q6kRows", "q4kr8Rows"} {
		if vex["·"+f+"AVXVNNI(SB),"] == 0 {
			t.Errorf("%sAVXVNNI has no VEX VPDPWSSD", f)
		}
	}
}
