//go:build amd64

package legacy

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"
)

// avx2Twin is the AVX2 spec of s's order and tile shape.
func avx2Twin(t *testing.T, s spec) spec {
	for _, a := range specs {
		if a.order == s.order && a.isa.name == isaAVX2.name && a.tileW == s.tileW && a.tileX == s.tileX {
			return a
		}
	}
	t.Fatalf("%s: no AVX2 kernel of the same shape", name(s))
	return spec{}
}

// fillRow is a row of n values of s's weight type (or, act, Q8_0) whose quant
// bytes are all q and whose f16 scales are all h.
func fillRow(s spec, act bool, n int, q byte, h uint16) []byte {
	bs := s.wb
	if act {
		bs = 34
	}
	b := make([]byte, need(n, 32, bs))
	for o := 0; o < len(b); o += bs {
		for k := range b[o : o+bs] {
			b[o+k] = q
		}
		binary.LittleEndian.PutUint16(b[o:], h)
	}
	return b
}

// TestAVXVNNIMatchesAVX2 holds every AVX-VNNI kernel (VEX VPDPBUSD with a
// bias correction in place of the AVX2 madd chains) to the AVX2 kernel of
// its order and shape, bit for bit with no excuse (the same float steps on
// the same hardware), and to the order's model: Dot, every Tile element and
// Rows, on random, zero and extreme blocks.
func TestAVXVNNIMatchesAVX2(t *testing.T) {
	if !isaAVXVNNI.has() {
		t.Skip("this CPU lacks AVX-VNNI (cpuid AVXVNNI): no avxvnni kernels registered")
	}
	for _, s := range specs {
		if s.isa.name != isaAVXVNNI.name {
			continue
		}
		t.Run(name(s), func(t *testing.T) {
			v, a := registered(t, s), registered(t, avx2Twin(t, s))
			r := rand.New(rand.NewPCG(11, uint64(len(s.order)+s.tileW)))
			type row struct {
				what string
				w, x []byte
			}
			for _, n := range []int{0, 32, 64, 96, 160, 256, 1024, 2048, 4128} {
				rows := []row{
					{"zero weights", fillRow(s, false, n, 0, 0), activations(r, s, n, true)},
					{"zero activations", weights(r, s, n, true), fillRow(s, true, n, 0, 0x3c00)},
					{"0x80 quants, -128", fillRow(s, false, n, 0x80, 0x7bff), fillRow(s, true, n, 0x80, 0x7bff)},
					{"0xff quants, 127", fillRow(s, false, n, 0xff, 0x3c00), fillRow(s, true, n, 0x7f, 0x0001)},
					{"0x7f quants, -128", fillRow(s, false, n, 0x7f, 0x0400), fillRow(s, true, n, 0x80, 0x3c00)},
				}
				for rep := 0; rep < 8; rep++ {
					ex := rep%2 == 1
					rows = append(rows, row{fmt.Sprintf("random %d", rep), weights(r, s, n, ex), activations(r, s, n, ex)})
				}
				for _, c := range rows {
					got, want := v.Dot(n, c.w, c.x), a.Dot(n, c.w, c.x)
					if !same(got, want) {
						t.Fatalf("n=%d %s: avxvnni %v, avx2 %v", n, c.what, got, want)
					}
					check(t, s, n, c.w, c.x, got, c.what)
				}
				// the tile over consecutive cases (weights rows apart, activations rows apart)
				wl, xl := need(n, 32, s.wb), need(n, 32, 34)
				var ws, xs []byte
				for _, c := range rows {
					ws, xs = append(ws, c.w...), append(xs, c.x...)
				}
				for first := 0; first+max(s.tileW, s.tileX) <= len(rows); first += 3 {
					ov, oa := make([]float32, s.tileW*s.tileX), make([]float32, s.tileW*s.tileX)
					v.Tile(n, ws[first*wl:], wl, xs[first*xl:], xl, ov, s.tileW)
					a.Tile(n, ws[first*wl:], wl, xs[first*xl:], xl, oa, s.tileW)
					for i := range ov {
						if !same(ov[i], oa[i]) {
							t.Fatalf("n=%d tile at %d out[%d]: avxvnni %v, avx2 %v", n, first, i, ov[i], oa[i])
						}
					}
				}
				if v.Rows != nil && a.Rows != nil {
					rv, ra := make([]float32, len(rows)), make([]float32, len(rows))
					v.Rows(n, ws, wl, rows[1].x, rv, 0)
					a.Rows(n, ws, wl, rows[1].x, ra, 0)
					for j := range rv {
						if !same(rv[j], ra[j]) {
							t.Fatalf("n=%d rows out[%d]: avxvnni %v, avx2 %v", n, j, rv[j], ra[j])
						}
					}
				}
			}
		})
	}
}

// TestVEXOnly checks the generated assembly: the AVX2 and AVX-VNNI kernels
// run on CPUs without AVX-512, so they name no Z register and no X/Y16-31
// (Go would give those instructions EVEX encodings), and the AVX-VNNI ones
// have VPDPBUSD only as VEX bytes (Go spells the mnemonic only as EVEX).
func TestVEXOnly(t *testing.T) {
	src, err := os.ReadFile("zz_legacy_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	high := regexp.MustCompile(`\b(Z\d+|[XY](1[6-9]|2\d|3[01]))\b`)
	var fn string
	vex := map[string]int{}
	for _, l := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(l, "TEXT ") {
			fn = strings.Fields(l)[1]
			continue
		}
		if !strings.Contains(fn, "AVX2") && !strings.Contains(fn, "AVXVNNI") {
			continue
		}
		code, _, _ := strings.Cut(l, "//")
		if m := high.FindString(code); m != "" {
			t.Errorf("%s uses %s, which needs AVX-512: %s", fn, m, strings.TrimSpace(l))
		}
		if strings.Contains(code, "VPDP") {
			t.Errorf("%s: an EVEX-only mnemonic: %s", fn, strings.TrimSpace(l))
		}
		if strings.HasPrefix(strings.TrimSpace(code), "BYTE") && strings.Contains(l, "// VPDPBUSD Y") {
			vex[fn]++
		}
	}
	for _, s := range specs {
		if s.isa.name != isaAVXVNNI.name {
			continue
		}
		for _, f := range []string{"Dot", fmt.Sprintf("Tile%dx%d", s.tileW, s.tileX)} {
			n := map[string]string{"DotQ8_0AVX2": "q80", "DotQ4_0AVX2": "q40", "DotQ4_0Repack8x8": "q40Repack"}[s.order]
			if vex["·"+n+"AVXVNNI"+f+"(SB),"] == 0 {
				t.Errorf("%sAVXVNNI%s has no VEX VPDPBUSD", n, f)
			}
		}
	}
}
