package vexvnni

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/pass"
	"github.com/mmcloughlin/avo/printer"
	"github.com/mmcloughlin/avo/reg"
)

// Known encodings, from the SDM's VEX.256.66.0F38.W0 50/52 /r with the
// VEX prefix fields worked by hand (R̄X̄B̄ m-mmmm, W v̄v̄v̄v̄ L pp, ModRM
// 11 reg rm), as GNU as writes them for "{vex} vpdpbusd %ymmB,%ymmA,%ymmACC".
var known = []struct {
	op          byte
	acc, a, b   int
	want        []byte
	intelSyntax string
}{
	{OpDPBUSD, 1, 2, 3, []byte{0xc4, 0xe2, 0x6d, 0x50, 0xcb}, "vpdpbusd ymm1, ymm2, ymm3"},
	{OpDPWSSD, 0, 8, 15, []byte{0xc4, 0xc2, 0x3d, 0x52, 0xc7}, "vpdpwssd ymm0, ymm8, ymm15"},
	{OpDPBUSD, 9, 15, 0, []byte{0xc4, 0x62, 0x05, 0x50, 0xc8}, "vpdpbusd ymm9, ymm15, ymm0"},
	{OpDPBUSD, 0, 0, 0, []byte{0xc4, 0xe2, 0x7d, 0x50, 0xc0}, "vpdpbusd ymm0, ymm0, ymm0"},
	{OpDPWSSD, 15, 15, 15, []byte{0xc4, 0x42, 0x05, 0x52, 0xff}, "vpdpwssd ymm15, ymm15, ymm15"},
}

func TestKnownEncodings(t *testing.T) {
	for _, k := range known {
		got, err := Encode(k.op, k.acc, k.a, k.b)
		if err != nil || !bytes.Equal(got, k.want) {
			t.Errorf("%s: % x, %v; want % x", k.intelSyntax, got, err, k.want)
		}
	}
}

func TestRejects(t *testing.T) {
	for _, c := range []struct {
		op        byte
		acc, a, b int
	}{{OpDPBUSD, 16, 0, 0}, {OpDPBUSD, 0, 16, 0}, {OpDPWSSD, 0, 0, 31}, {OpDPBUSD, -1, 0, 0}, {0x51, 0, 0, 0}} {
		if enc, err := Encode(c.op, c.acc, c.a, c.b); err == nil {
			t.Errorf("Encode(%#x, %d, %d, %d) = % x, want an error", c.op, c.acc, c.a, c.b, enc)
		}
	}
}

// TestAgainstGNUAs encodes every register triple of both instructions and
// compares with GNU as and objdump's bytes.
func TestAgainstGNUAs(t *testing.T) {
	as, err1 := exec.LookPath("as")
	objdump, err2 := exec.LookPath("objdump")
	if err1 != nil || err2 != nil {
		t.Skip("GNU as or objdump not installed: the hard-coded encodings are the only reference")
	}
	var src strings.Builder
	var want [][]byte
	for _, op := range []byte{OpDPBUSD, OpDPWSSD} {
		for acc := 0; acc < 16; acc++ {
			for a := 0; a < 16; a++ {
				for b := 0; b < 16; b++ {
					fmt.Fprintf(&src, "{vex} %s %%ymm%d,%%ymm%d,%%ymm%d\n", strings.ToLower(names[op]), b, a, acc)
					e, err := Encode(op, acc, a, b)
					if err != nil {
						t.Fatal(err)
					}
					want = append(want, e)
				}
			}
		}
	}
	dir := t.TempDir()
	s, o := filepath.Join(dir, "x.s"), filepath.Join(dir, "x.o")
	if err := os.WriteFile(s, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(as, "--64", "-o", o, s).CombinedOutput(); err != nil {
		t.Skipf("this as cannot assemble AVX-VNNI (binutils before 2.36?): %v: %s", err, out)
	}
	out, err := exec.Command(objdump, "-d", "-j", ".text", o).Output()
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`^\s*[0-9a-f]+:\s+((?:[0-9a-f]{2} )+)\s*\{vex\}`)
	var got [][]byte
	for _, l := range strings.Split(string(out), "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var b []byte
		for _, h := range strings.Fields(m[1]) {
			v, _ := strconv.ParseUint(h, 16, 8)
			b = append(b, byte(v))
		}
		got = append(got, b)
	}
	if len(got) != len(want) {
		t.Fatalf("objdump listed %d instructions, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("instruction %d: as % x, Encode % x", i, got[i], want[i])
		}
	}
}

// TestEmitAfterAllocation builds a function with virtual registers through
// avo, compiles it, and checks the printed BYTE line carries the encoding of
// the registers avo bound, and that the instruction's inputs keep its
// operands live (the accumulator and both sources are distinct registers).
func TestEmitAfterAllocation(t *testing.T) {
	ctx := build.NewContext()
	ctx.Function("f")
	ctx.SignatureExpr("func(p *byte)")
	p := ctx.Load(ctx.Param("p"), ctx.GP64())
	a, b, acc := ctx.YMM(), ctx.YMM(), ctx.YMM()
	ctx.VMOVDQU(operandMem(p, 0), a)
	ctx.VMOVDQU(operandMem(p, 32), b)
	ctx.VMOVDQU(operandMem(p, 64), acc)
	withContext(ctx, func() { VPDPBUSD(b, a, acc) })
	ctx.VMOVDQU(acc, operandMem(p, 64))
	ctx.RET()
	f, err := ctx.Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := pass.Compile.Execute(f); err != nil {
		t.Fatal(err)
	}
	out, err := printer.NewGoAsm(printer.Config{}).Print(f)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`BYTE\s+(\$0x[0-9a-f]{2}(?:; BYTE \$0x[0-9a-f]{2})*) // VPDPBUSD Y(\d+), Y(\d+), Y(\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no VPDPBUSD bytes in\n%s", out)
	}
	n := func(s []byte) int { v, _ := strconv.Atoi(string(s)); return v }
	bb, aa, cc := n(m[2]), n(m[3]), n(m[4])
	if bb == aa || aa == cc || bb == cc {
		t.Fatalf("operands share registers Y%d, Y%d, Y%d:\n%s", bb, aa, cc, out)
	}
	enc, _ := Encode(OpDPBUSD, cc, aa, bb)
	var want []string
	for _, v := range enc {
		want = append(want, fmt.Sprintf("$0x%02x", v))
	}
	if string(m[1]) != strings.Join(want, "; BYTE ") {
		t.Fatalf("printed %s, want % x", m[1], enc)
	}
	if !bytes.Contains(out, []byte("AVXVNNI")) {
		t.Errorf("the function's Requires line does not name AVXVNNI:\n%s", out)
	}
}

// emit adds to avo's global context; point it at ctx for the test.
func withContext(ctx *build.Context, f func()) {
	old := addInstruction
	addInstruction = ctx.Instruction
	defer func() { addInstruction = old }()
	f()
}

func operandMem(base reg.Register, disp int) operand.Mem {
	return operand.Mem{Base: base, Disp: disp}
}
