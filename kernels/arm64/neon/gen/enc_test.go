package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var wordLine = regexp.MustCompile(`^\tWORD \$0x([0-9a-f]{8}) // (.*)$`)

// TestEncodingsMatchLLVM assembles the spelling of every WORD in the
// checked-in assembly with llvm-mc and compares the encodings, so a wrong
// field in enc.go cannot hide behind a plausible comment
// (scripts/check-generated.sh keeps that file the generator's output).
func TestEncodingsMatchLLVM(t *testing.T) {
	src, err := os.ReadFile("../zz_neon_arm64.s")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint32{}
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		m := wordLine.FindStringSubmatch(sc.Text())
		if m == nil {
			if strings.Contains(sc.Text(), "WORD") {
				t.Fatalf("WORD line without a spelling: %q", sc.Text())
			}
			continue
		}
		w, _ := strconv.ParseUint(m[1], 16, 32)
		if old, ok := want[m[2]]; ok && old != uint32(w) {
			t.Fatalf("%q encoded as %#x and %#x", m[2], old, w)
		}
		want[m[2]] = uint32(w)
	}
	if len(want) < 50 {
		t.Fatalf("only %d distinct encoded instructions in the assembly", len(want))
	}
	mc, err := exec.LookPath("llvm-mc")
	if err != nil {
		t.Skip("llvm-mc not installed: encodings not cross-checked")
	}
	var texts []string
	for s := range want {
		texts = append(texts, s)
	}
	cmd := exec.Command(mc, "-triple=aarch64", "-mattr=+dotprod", "-show-encoding")
	cmd.Stdin = strings.NewReader(strings.Join(texts, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("llvm-mc: %v\n%s", err, out)
	}
	enc := regexp.MustCompile(`encoding: \[0x([0-9a-f]{2}),0x([0-9a-f]{2}),0x([0-9a-f]{2}),0x([0-9a-f]{2})\]`)
	var got []uint32
	for _, l := range strings.Split(string(out), "\n") {
		if m := enc.FindStringSubmatch(l); m != nil {
			var b [4]uint64
			for i := range b {
				b[i], _ = strconv.ParseUint(m[i+1], 16, 8)
			}
			got = append(got, uint32(b[0]|b[1]<<8|b[2]<<16|b[3]<<24))
		}
	}
	if len(got) != len(texts) {
		t.Fatalf("llvm-mc encoded %d of %d instructions:\n%s", len(got), len(texts), out)
	}
	for i, s := range texts {
		if got[i] != want[s] {
			t.Errorf("%s: generated %#08x, llvm-mc %#08x", s, want[s], got[i])
		}
	}
}

// TestEncoderFields checks the encoders' range guards: a by-element half
// index names its register in four bits.
func TestEncoderFields(t *testing.T) {
	for _, f := range []func(){
		func() { smlalE(false, 0, 1, 16, 0) },
		func() { mlaE(0, 1, 2, 4) },
		func() { smullE(false, 0, 1, 2, 8) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("out-of-range operand encoded")
				}
			}()
			f()
		}()
	}
	if i := sdot(0, 1, 2); i.word != 0x4e829420 || i.text != fmt.Sprintf("sdot v%d.4s, v%d.16b, v%d.16b", 0, 1, 2) {
		t.Errorf("sdot v0, v1, v2: %#x %q", i.word, i.text)
	}
}
