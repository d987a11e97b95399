package exec

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testdata = "../../testdata"

func load(t testing.TB, rel string, opt Options) *Runner {
	t.Helper()
	m := openModel(t, rel)
	if opt.Threads == 0 {
		opt.Threads = 2
	}
	r, err := NewRunner(m, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func readJSON(t testing.TB, rel string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata, "refs", rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

func logSoftmax(x []float32) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - m)
	}
	lse := m + math.Log(s)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v) - lse
	}
	return out
}

// greedy runs prompt then n greedy steps, stopping after eos.
func greedy(t testing.TB, r *Runner, prompt []int32, n int, eos int32, step func(i int, logits []float32)) []int32 {
	r.Truncate(0)
	logits, err := r.Forward(prompt)
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	for i := 0; i < n; i++ {
		if step != nil {
			step(i, logits)
		}
		next := argmax(logits)
		if next == eos {
			break
		}
		out = append(out, next)
		if logits, err = r.Forward([]int32{next}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

type storiesRef struct {
	Results []struct {
		Prompt       string
		PromptTokens []int32 `json:"prompt_tokens"`
		GeneratedIDs []int32 `json:"generated_ids"`
		Steps        []struct {
			ID    int32
			Top10 [][2]float64
		}
	}
}

// nearTie is the top-2 margin (nats) under which llama.cpp's own decode
// path and ours may order two tokens differently: its decode steps differ
// from a batch evaluation of the same positions by up to ~1e-2 nats (see
// docs/perf/current.md, "accuracy"), so a closer call is a coin toss.
const nearTie = 0.01

// compareGreedy checks our greedy continuation against llama.cpp's token by
// token and stops at the first difference. No near tie is excused any more:
// with the x86 kernel orders (kernels/quant/x86variants.go) every greedy
// continuation, stories260K-Q4_0's 0.0048-nat tie at token 46 included,
// equals llama.cpp's.
func compareGreedy(t *testing.T, name string, got, want []int32, top func(i int) [][2]float64) {
	t.Helper()
	for i := range want {
		if i >= len(got) {
			t.Errorf("%s: stopped after %d tokens, llama.cpp made %d", name, len(got), len(want))
			return
		}
		if got[i] == want[i] {
			continue
		}
		tp := top(i)
		margin := 0.0
		if len(tp) > 1 {
			margin = tp[0][1] - tp[1][1]
		}
		t.Errorf("%s: llama.cpp's margin at token %d was %.4f nats", name, i, margin)
		t.Errorf("%s: token %d is %d, llama.cpp chose %d\n got %v\nwant %v", name, i, got[i], want[i], got, want)
		return
	}
}

// On the trained stories260K (F32, Q8_0, Q4_0) greedy generation must equal
// llama.cpp's token for token, and the top-10 log-probabilities stay close.
func TestStoriesGreedyMatchesLlamaCpp(t *testing.T) {
	for _, c := range []struct{ model, ref string }{
		{"stories260K.gguf", "stories260K/generate.json"},
		{"derived/stories260K-Q8_0.gguf", "stories260K-Q8_0/generate.json"},
		{"derived/stories260K-Q4_0.gguf", "stories260K-Q4_0/generate.json"},
	} {
		t.Run(c.model, func(t *testing.T) {
			var ref storiesRef
			readJSON(t, c.ref, &ref)
			r := load(t, c.model, Options{})
			for _, res := range ref.Results {
				var dev deviation
				same := true // our tokens so far are llama.cpp's
				got := greedy(t, r, res.PromptTokens, len(res.GeneratedIDs)+1, 2, func(i int, logits []float32) {
					if same && i < len(res.Steps) {
						dev.add(logSoftmax(logits), res.Steps[i].Top10)
						same = argmax(logits) == res.GeneratedIDs[i]
					}
				})
				compareGreedy(t, fmt.Sprintf("%s %q", c.model, res.Prompt), got, res.GeneratedIDs, func(i int) [][2]float64 { return res.Steps[i].Top10 })
				dev.check(t, fmt.Sprintf("%q", res.Prompt))
			}
		})
	}
}

// deviation collects |our log-probability − llama.cpp's| over the reported
// top candidates of each step.
type deviation struct {
	worst, sum float64
	n          int
	first      float64 // at the first step (the prompt's last position)
}

func (d *deviation) add(lp []float64, top [][2]float64) {
	for _, p := range top {
		e := math.Abs(lp[int(p[0])] - p[1])
		if d.n == 0 || e > d.worst {
			d.worst = math.Max(d.worst, e)
		}
		d.sum += e
		d.n++
	}
	if d.n == len(top) {
		d.first = d.worst
	}
}

// Bounds on the log-probability differences. Every prompt position agrees
// with llama.cpp to <1e-5, and most runs to ~1e-6 throughout; the rest
// (stories260K F32 decode ~1e-3, stories260K-Q8_0 "The little dog" from
// token 48, tiny256 IQ4_XS/Q2_K/Q4_K_M/Q6_K at some steps) still have kernels
// whose x86 accumulation order is not reproduced, so an f16 KV value or an
// 8-bit activation rounds the other way. Tighten these as the kernels converge.
const (
	maxFirstDiff = 1e-4 // the prompt's last position (worst now 3.5e-5, stories260K F32)
	maxMeanDiff  = 0.03 // over every step and reported candidate (worst now 0.024, tiny256-Q2_K)
	maxDiff      = 0.2  // (worst now 0.16: stories260K-Q8_0, tiny256-Q2_K)
)

// check holds the differences to the bounds above.
func (d *deviation) check(t *testing.T, name string) {
	t.Helper()
	mean := d.sum / float64(max(d.n, 1))
	t.Logf("%s: log-probability difference at the prompt %.2g; over %d values mean %.2g, worst %.2g", name, d.first, d.n, mean, d.worst)
	if d.first > maxFirstDiff || mean > maxMeanDiff || d.worst > maxDiff {
		t.Errorf("%s: log-probabilities differ from llama.cpp's: at the prompt %.2g (want < %g), mean %.2g (want < %g), worst %.2g (want < %g)",
			name, d.first, maxFirstDiff, mean, maxMeanDiff, d.worst, maxDiff)
	}
}

func TestStoriesLastLogits(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testdata, "refs/stories260K/logits_last.f32"))
	if err != nil {
		t.Fatal(err)
	}
	r := load(t, "stories260K.gguf", Options{})
	logits, err := r.Forward([]int32{1, 403, 407, 261, 378})
	if err != nil {
		t.Fatal(err)
	}
	if len(logits) != len(b)/4 {
		t.Fatalf("%d logits, reference has %d", len(logits), len(b)/4)
	}
	worst := 0.0
	for i := range logits {
		want := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		worst = math.Max(worst, math.Abs(float64(logits[i]-want)))
	}
	if worst > 1e-3 {
		t.Fatalf("last-position logits differ from llama.cpp's by up to %g", worst)
	}
	t.Logf("worst logit difference %.3g", worst)
}

type topRef struct {
	Generations []struct {
		Prompt       json.RawMessage // text, or token ids for the synthetic models
		PromptTokens []int32         `json:"prompt_tokens"`
		Tokens       []int32
		Steps        []struct {
			Token int32
			Top   [][2]float64
		}
	}
}

// The random-weight model's top candidates are often within 1e-4 nats, so it
// is compared teacher-forced: feed llama.cpp's tokens and check each step.
func TestTinyRandomTeacherForced(t *testing.T) {
	var ref topRef
	readJSON(t, "llama-2-tiny-random.top5.json", &ref)
	r := load(t, "llama-2-tiny-random.gguf", Options{})
	checkTeacherForced(t, r, ref, 1e-3)
}

// checkTeacherForced feeds llama.cpp's tokens and compares each step: the
// top-1 wherever llama.cpp's margin is clear, and log-probabilities within
// tol (tol < 0: within llama.cpp's decode drift, see deviation.check).
func checkTeacherForced(t *testing.T, r *Runner, ref topRef, tol float64) {
	t.Helper()
	for _, g := range ref.Generations {
		var dev deviation
		r.Truncate(0)
		logits, err := r.Forward(g.PromptTokens)
		if err != nil {
			t.Fatal(err)
		}
		worst, checked := 0.0, 0
		for i, st := range g.Steps {
			lp := logSoftmax(logits)
			dev.add(lp, st.Top)
			for _, p := range st.Top {
				worst = math.Max(worst, math.Abs(lp[int(p[0])]-p[1]))
			}
			margin := 1e-3
			if tol < 0 {
				margin = nearTie
			}
			if len(st.Top) > 1 && st.Top[0][1]-st.Top[1][1] > margin {
				checked++
				if got := argmax(logits); got != int32(st.Top[0][0]) {
					t.Errorf("%s step %d: top-1 %d, llama.cpp %d (margin %.2g)", label(g.Prompt), i, got, int32(st.Top[0][0]), st.Top[0][1]-st.Top[1][1])
				}
			}
			if i+1 == len(g.Steps) {
				break
			}
			if logits, err = r.Forward([]int32{st.Token}); err != nil {
				t.Fatal(err)
			}
		}
		if tol < 0 {
			dev.check(t, label(g.Prompt))
			continue
		}
		if worst > tol {
			t.Errorf("%s: log-probabilities differ from llama.cpp's by up to %.2g (tolerance %g)", label(g.Prompt), worst, tol)
		}
		t.Logf("%s: %d steps, %d with a clear top-1; worst logprob difference %.2g", label(g.Prompt), len(g.Steps), checked, worst)
	}
}

// Every synthetic quantization runs; where llama.cpp's output is given,
// greedy generation matches it.
func TestSyntheticQuantizations(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(testdata, "synthetic", "*.gguf"))
	if len(files) != 13 {
		t.Fatalf("want 13 synthetic models, found %d", len(files))
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			r := load(t, filepath.Join("synthetic", name), Options{})
			refPath := filepath.Join(testdata, "refs", "synthetic", name[:len(name)-len(".gguf")]+".json")
			if _, err := os.Stat(refPath); err != nil {
				out := greedy(t, r, []int32{1, 17, 300, 512, 9}, 16, 2, nil)
				if len(out) == 0 {
					t.Fatal("generated nothing")
				}
				t.Logf("no llama.cpp reference for %s; ran %d tokens", name, len(out))
				return
			}
			var ref topRef
			readJSON(t, filepath.Join("synthetic", filepath.Base(refPath)), &ref)
			for _, g := range ref.Generations {
				got := greedy(t, r, g.PromptTokens, len(g.Tokens)+1, 2, nil)
				compareGreedy(t, name+" "+label(g.Prompt), got, g.Tokens, func(i int) [][2]float64 { return g.Steps[i].Top })
			}
			checkTeacherForced(t, r, ref, -1)
		})
	}
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// label is a prompt as one short line for messages.
func label(raw json.RawMessage) string { return strings.Join(strings.Fields(string(raw)), "") }
