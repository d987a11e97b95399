package ptx

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/ops"
)

var (
	regDecl = regexp.MustCompile(`\.reg \.\w+ (%[a-z]+)<(\d+)>;`)
	regUse  = regexp.MustCompile(`%([a-z]+)(\d+)\b`)
	special = regexp.MustCompile(`%(tid|ntid|ctaid|nctaid)\.[xyz]`)
)

// wellFormed checks the structure of one rendered module: header, an entry
// per kernel with its parameters, balanced braces, every register declared,
// every branch target placed.
func wellFormed(t *testing.T, src string, ks []*kernel.Kernel, sm int) {
	t.Helper()
	for _, want := range []string{".version ", fmt.Sprintf(".target sm_%d\n", sm), ".address_size 64\n"} {
		if !strings.Contains(src, want) {
			t.Errorf("missing %q", want)
		}
	}
	if strings.Count(src, "{") != strings.Count(src, "}") {
		t.Errorf("unbalanced braces")
	}
	if strings.Contains(src, "%err") {
		t.Errorf("error register in output")
	}
	for _, k := range ks {
		if !strings.Contains(src, ".visible .entry "+k.Name+"(") {
			t.Errorf("%s: no entry", k.Name)
		}
	}
	for _, body := range strings.Split(src, ".visible .entry ")[1:] {
		name := body[:strings.IndexByte(body, '(')]
		decl := map[string]int{}
		for _, m := range regDecl.FindAllStringSubmatch(body, -1) {
			decl[m[1][1:]], _ = strconv.Atoi(m[2])
		}
		for _, m := range regUse.FindAllStringSubmatch(special.ReplaceAllString(body, ""), -1) {
			n, _ := strconv.Atoi(m[2])
			if lim, ok := decl[m[1]]; !ok || n >= lim || n == 0 {
				t.Errorf("%s: register %%%s%s not declared", name, m[1], m[2])
				break
			}
		}
		placed := map[string]bool{}
		for _, l := range regexp.MustCompile(`(?m)^(\$L\d+):`).FindAllStringSubmatch(body, -1) {
			placed[l[1]] = true
		}
		for _, l := range regexp.MustCompile(`bra (\$L\d+);`).FindAllStringSubmatch(body, -1) {
			if !placed[l[1]] {
				t.Errorf("%s: branch to unplaced %s", name, l[1])
			}
		}
		for _, line := range strings.Split(body, "\n") {
			l := strings.TrimSpace(line)
			if l == "" || strings.HasPrefix(l, "//") || strings.HasSuffix(l, ":") || l == "{" || l == "}" || l == ")" || strings.HasPrefix(l, ".param") ||
				strings.HasPrefix(l, ".maxntid ") || strings.HasPrefix(l, ".minnctapersm ") { // an entry's performance directives
				continue
			}
			if !strings.HasSuffix(l, ";") && !strings.HasSuffix(l, "(") {
				t.Errorf("%s: unterminated %q", name, l)
				break
			}
		}
	}
}

// allKernels is every kernel of kernels/ops that stores its outputs; those
// returning a Result (the Go target's row dots) are refused, which
// TestRenderOps checks.
func allKernels() []*kernel.Kernel {
	groups := ops.Groups()
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	var ks []*kernel.Kernel
	for _, g := range names {
		for _, k := range groups[g] {
			if k.Result == nil {
				ks = append(ks, k)
			}
		}
	}
	return ks
}

// Every kernel of kernels/ops renders for sm_80 and sm_90, alone and as one
// module, with parameters in the ABI's order.
func TestRenderOps(t *testing.T) {
	ks := allKernels()
	for _, sm := range []int{80, 90} {
		tg := Target{SM: sm}
		for _, k := range ks {
			src, err := Render(k, tg)
			if err != nil {
				t.Fatalf("%s: %v", k.Name, err)
			}
			wellFormed(t, src, []*kernel.Kernel{k}, sm)
			var want []string
			for i, p := range k.Params {
				if p.Buf != nil {
					n := paramName(i, p.Buf.Name)
					want = append(want, ".param .u64 "+n, ".param .u64 "+n+"_len")
				} else {
					want = append(want, ".param ."+scalarParam[p.Var.Kind]+" "+paramName(i, p.Var.Name))
				}
			}
			if !strings.Contains(src, "(\n\t"+strings.Join(want, ",\n\t")+"\n)") {
				t.Errorf("%s: parameters are not %v", k.Name, want)
			}
		}
		for _, g := range ops.Groups() {
			for _, k := range g {
				if _, err := Render(k, tg); k.Result != nil && (err == nil || !strings.Contains(err.Error(), "Return")) {
					t.Errorf("%s returns a result: %v", k.Name, err)
				}
			}
		}
		src, err := Module(ks, tg)
		if err != nil {
			t.Fatal(err)
		}
		wellFormed(t, src, ks, sm)
		t.Logf("sm_%d: %d kernels, %d lines of PTX", sm, len(ks), strings.Count(src, "\n"))
	}
}

func TestLaunchPlans(t *testing.T) {
	want := map[string]string{"MatVecQ4_0": "r", "MatVecQ6_K": "r", "RopeNeox": "h", "DequantQ4_K": "", "RMSNorm": "", "Softmax": ""}
	for _, k := range allKernels() {
		w, ok := want[k.Name]
		if !ok {
			continue
		}
		l, err := Plan(k, Target{SM: 90})
		if err != nil || l.Loop != w {
			t.Errorf("%s: plan %+v, %v; want loop %q", k.Name, l, err, w)
		}
	}
	mv := ops.MatVec(ops.Q4_K)
	n, err := Threads(mv, Target{SM: 90}, Elems(7*2*144), make([]float32, 512), Elems(7))
	if err != nil || n != 7 {
		t.Errorf("MatVecQ4_K threads: %d, %v; want 7", n, err)
	}
	rope := ops.Rope(0)
	n, err = Threads(rope, Target{SM: 90}, Elems(192), Elems(192), 5, 64, 64, float32(1e4), float32(1))
	if err != nil || n != 3 {
		t.Errorf("Rope threads: %d, %v; want 3", n, err)
	}
	if n, _ := Threads(ops.Softmax(), Target{SM: 90}, Elems(9), Elems(9)); n != 1 {
		t.Errorf("Softmax threads: %d, want 1", n)
	}
}
