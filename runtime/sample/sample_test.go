package sample

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func randLogits(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	l := make([]float32, n)
	for i := range l {
		l[i] = float32(r.NormFloat64() * 3)
	}
	return l
}

func mustNew(t testing.TB, p Params, v int) *Sampler {
	t.Helper()
	s, err := New(p, v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestArgmax(t *testing.T) {
	cases := []struct {
		l    []float32
		want int32
	}{
		{nil, -1},
		{[]float32{1}, 0},
		{[]float32{1, 3, 3, 2}, 1},
		{[]float32{float32(math.NaN()), -1, 5, float32(math.NaN())}, 2},
		{[]float32{float32(math.Inf(-1)), float32(math.Inf(-1))}, 0},
		{[]float32{-2, float32(math.Inf(1)), float32(math.Inf(1))}, 1},
	}
	for _, c := range cases {
		if got := Argmax(c.l); got != c.want {
			t.Errorf("Argmax(%v) = %d, want %d", c.l, got, c.want)
		}
	}
}

func TestGreedyEqualsArgmax(t *testing.T) {
	p := DefaultParams()
	p.Temperature = 0
	s := mustNew(t, p, 1000)
	for i := 0; i < 50; i++ {
		l := randLogits(1000, uint64(i))
		if i%5 == 0 {
			l[7], l[3] = 100, 100 // tie: the lower id wins
		}
		orig := append([]float32(nil), l...)
		if got, want := s.Sample(l), Argmax(l); got != want {
			t.Fatalf("draw %d: greedy %d, argmax %d", i, got, want)
		}
		for j := range l {
			if l[j] != orig[j] {
				t.Fatal("Sample modified its logits")
			}
		}
	}
}

func draws(s *Sampler, l []float32, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = s.Sample(l)
		s.Accept(out[i])
	}
	return out
}

func TestSeedDeterminism(t *testing.T) {
	l := randLogits(500, 3)
	for i := range l {
		l[i] *= 0.3 // flat enough that draws vary
	}
	p := DefaultParams()
	p.TopK, p.MinP = 0, 0
	p.RepeatPenalty = 1.2
	p.Seed = 42
	a := draws(mustNew(t, p, 500), l, 200)
	s := mustNew(t, p, 500)
	b := draws(s, l, 200)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed differs at draw %d", i)
		}
	}
	s.Reset()
	c := draws(s, l, 200)
	for i := range a {
		if a[i] != c[i] {
			t.Fatalf("after Reset, draw %d differs", i)
		}
	}
	p.Seed = 43
	d := draws(mustNew(t, p, 500), l, 200)
	same := 0
	for i := range a {
		if a[i] == d[i] {
			same++
		}
	}
	if same == len(a) {
		t.Fatal("different seeds gave the same sequence")
	}
	distinct := map[int32]bool{}
	for _, x := range a {
		distinct[x] = true
	}
	if len(distinct) < 10 {
		t.Fatalf("only %d distinct tokens in 200 draws from a flat distribution", len(distinct))
	}
}

func TestTopK1IsGreedy(t *testing.T) {
	for _, temp := range []float32{0.1, 1, 5, 100} {
		p := DefaultParams()
		p.TopK, p.TopP, p.MinP, p.Temperature = 1, 1, 0, temp
		s := mustNew(t, p, 300)
		for i := 0; i < 50; i++ {
			l := randLogits(300, uint64(i))
			l[299] = l[Argmax(l)] // tie with a higher id must lose
			if got, want := s.Sample(l), Argmax(l); got != want {
				t.Fatalf("temp %v: top-k 1 drew %d, argmax %d", temp, got, want)
			}
		}
	}
}

func TestTinyTopPIsGreedy(t *testing.T) {
	for _, k := range []int{0, 50} { // the sorted and the partial-selection paths
		p := DefaultParams()
		p.TopK, p.TopP, p.MinP, p.Temperature = k, 1e-6, 0, 3
		s := mustNew(t, p, 2000)
		for i := 0; i < 50; i++ {
			l := randLogits(2000, uint64(i))
			if got, want := s.Sample(l), Argmax(l); got != want {
				t.Fatalf("top-k %d: top-p 1e-6 drew %d, argmax %d", k, got, want)
			}
		}
	}
}

// softmax of l at temperature 1, in float64.
func softmax(l []float32) []float64 {
	m := math.Inf(-1)
	for _, x := range l {
		m = math.Max(m, float64(x))
	}
	p := make([]float64, len(l))
	var z float64
	for i, x := range l {
		p[i] = math.Exp(float64(x) - m)
		z += p[i]
	}
	for i := range p {
		p[i] /= z
	}
	return p
}

// chiSquare of observed counts against expected probabilities (those with
// probability 0 must never be seen).
func chiSquare(t *testing.T, counts []int, probs []float64, n int) float64 {
	t.Helper()
	var x2 float64
	for i, p := range probs {
		if p == 0 {
			if counts[i] != 0 {
				t.Fatalf("token %d has probability 0 but was drawn %d times", i, counts[i])
			}
			continue
		}
		e := float64(p * float64(n))
		d := float64(counts[i]) - e
		x2 += d * d / e
	}
	return x2
}

func TestDistributionMatchesSoftmax(t *testing.T) {
	l := []float32{1, 2, 0.5, -1, 1.5}
	const n = 20000
	for _, temp := range []float32{1, 0.5, 2} {
		p := DefaultParams()
		p.Temperature, p.TopK, p.TopP, p.MinP = temp, 0, 1, 0
		p.Seed = 7
		s := mustNew(t, p, len(l))
		counts := make([]int, len(l))
		for i := 0; i < n; i++ {
			counts[s.Sample(l)]++
		}
		scaled := make([]float32, len(l))
		for i := range l {
			scaled[i] = l[i] / temp
		}
		// 4 degrees of freedom: P(X2 > 18.47) = 0.001.
		if x2 := chiSquare(t, counts, softmax(scaled), n); x2 > 18.47 {
			t.Errorf("temp %v: chi-square %.2f over 4 dof (counts %v, want %v)", temp, x2, counts, softmax(scaled))
		}
	}
}

func TestFiltersDistribution(t *testing.T) {
	// probs at temp 1 ≈ [0.0158 0.0430 0.1170 0.3181 0.0058 0.5003] (ids 0..5)
	l := []float32{0, 1, 2, 3, -1, 3.453}
	sm := softmax(l)
	keep := func(ids ...int) []float64 {
		p := make([]float64, len(l))
		var z float64
		for _, i := range ids {
			p[i] = sm[i]
			z += sm[i]
		}
		for i := range p {
			p[i] /= z
		}
		return p
	}
	cases := []struct {
		name  string
		set   func(*Params)
		probs []float64
	}{
		{"top-k 3", func(p *Params) { p.TopK = 3 }, keep(5, 3, 2)},
		{"top-p 0.8", func(p *Params) { p.TopP = 0.8 }, keep(5, 3)},
		{"top-p 0.9", func(p *Params) { p.TopP = 0.9 }, keep(5, 3, 2)},
		{"top-p 0.5 (crossing token kept)", func(p *Params) { p.TopP = 0.5 }, keep(5)},
		{"min-p 0.1", func(p *Params) { p.MinP = 0.1 }, keep(5, 3, 2)},
		{"min-p 0.5", func(p *Params) { p.MinP = 0.5 }, keep(5, 3)},
		{"min-p 0.05", func(p *Params) { p.MinP = 0.05 }, keep(5, 3, 2, 1)},
		{"top-k 4 then top-p 0.8", func(p *Params) { p.TopK, p.TopP = 4, 0.8 }, keep(5, 3)},
		{"top-k 2 then min-p 0.05", func(p *Params) { p.TopK, p.MinP = 2, 0.05 }, keep(5, 3)},
	}
	const n = 12000
	for _, c := range cases {
		p := Params{Temperature: 1, TopP: 1, RepeatPenalty: 1, RepeatLastN: 64, Seed: 11}
		c.set(&p)
		s := mustNew(t, p, len(l))
		counts := make([]int, len(l))
		for i := 0; i < n; i++ {
			counts[s.Sample(l)]++
		}
		dof := -1
		for _, q := range c.probs {
			if q > 0 {
				dof++
			}
		}
		// P(X2 > limit) = 0.001 for 0..3 degrees of freedom.
		limit := []float64{1e-9, 10.83, 13.82, 16.27}[dof]
		if x2 := chiSquare(t, counts, c.probs, n); x2 > limit {
			t.Errorf("%s: chi-square %.2f (counts %v, want %v)", c.name, x2, counts, c.probs)
		}
	}
}

// Filters must agree between the heap path (top-k) and the sort path.
func TestTopPLargeNucleus(t *testing.T) {
	const v = 5000
	l := randLogits(v, 9)
	for i := range l {
		l[i] *= 0.05 // nearly flat: the nucleus is most of the vocabulary
	}
	sm := softmax(l)
	p := Params{Temperature: 1, TopP: 0.9, RepeatPenalty: 1, Seed: 1}
	s := mustNew(t, p, v)
	seen := map[int32]bool{}
	for i := 0; i < 3000; i++ {
		seen[s.Sample(l)] = true
	}
	// Every token drawn must be in the 0.9 nucleus.
	ids := selectTop(l, v, nil)
	var cum float64
	in := map[int32]bool{}
	for _, id := range ids {
		in[id] = true
		cum += sm[id]
		if cum >= 0.9 {
			break
		}
	}
	for id := range seen {
		if !in[id] {
			t.Fatalf("token %d outside the top-p nucleus was drawn", id)
		}
	}
	if len(seen) < 1000 {
		t.Fatalf("only %d distinct tokens from a nucleus of %d", len(seen), len(in))
	}
}

func TestPenalties(t *testing.T) {
	p := DefaultParams()
	p.RepeatPenalty, p.FrequencyPenalty, p.PresencePenalty, p.RepeatLastN = 2, 0.5, 0.25, 4
	s := mustNew(t, p, 8)
	for _, tok := range []int32{1, 2, 2, 3, 3, 3} { // window of 4 keeps 2 3 3 3
		s.Accept(tok)
	}
	s.Accept(-1)
	s.Accept(99) // ignored
	l := []float32{1, 4, 3, -3, 0, 5, 6, 7}
	s.applyPenalties(l)
	want := []float32{1, 4, 3/2.0 - 0.5 - 0.25, -3*2 - 3*0.5 - 0.25, 0, 5, 6, 7}
	for i := range l {
		if math.Abs(float64(l[i]-want[i])) > 1e-6 {
			t.Errorf("logit %d: got %v, want %v", i, l[i], want[i])
		}
	}
	if s.Count(1) != 0 || s.Count(2) != 1 || s.Count(3) != 3 {
		t.Errorf("counts %d %d %d, want 0 1 3", s.Count(1), s.Count(2), s.Count(3))
	}
	// Greedy sees the penalized logits: 7 is best unless penalized.
	p.Temperature = 0
	g := mustNew(t, p, 8)
	l = []float32{0, 0, 0, 0, 0, 0, 0, 7}
	if got := g.Sample(l); got != 7 {
		t.Fatalf("greedy %d, want 7", got)
	}
	for i := 0; i < 4; i++ {
		g.Accept(7)
	}
	// 7/2 - 4*0.5 - 0.25 = 1.25 > 0 still wins; a fifth 7 in a window of 4 stays at 4.
	g.Accept(7)
	if got := g.Count(7); got != 4 {
		t.Fatalf("count %d in a window of 4", got)
	}
	l[6] = 1.3
	if got := g.Sample(l); got != 6 {
		t.Fatalf("greedy after penalties %d, want 6", got)
	}
	g.Reset()
	if got := g.Sample(l); got != 7 || g.Count(7) != 0 {
		t.Fatalf("after Reset: %d, count %d", got, g.Count(7))
	}
	// Whole history.
	p.RepeatLastN = -1
	h := mustNew(t, p, 8)
	for i := 0; i < 100; i++ {
		h.Accept(int32(i % 3))
	}
	if h.Count(0) != 34 || h.Count(2) != 33 {
		t.Fatalf("whole-history counts %d %d", h.Count(0), h.Count(2))
	}
	// Window 0 disables penalties.
	p.RepeatLastN = 0
	z := mustNew(t, p, 8)
	z.Accept(7)
	if got := z.Sample([]float32{0, 0, 0, 0, 0, 0, 0, 7}); got != 7 || z.Count(7) != 0 {
		t.Fatal("RepeatLastN 0 still penalizes")
	}
}

// Window eviction keeps counts right under churn, against a brute-force count.
func TestPenaltyWindowChurn(t *testing.T) {
	p := DefaultParams()
	p.PresencePenalty, p.RepeatLastN = 1, 7
	s := mustNew(t, p, 10)
	r := rand.New(rand.NewPCG(5, 5))
	var hist []int32
	for i := 0; i < 500; i++ {
		tok := int32(r.IntN(10))
		s.Accept(tok)
		hist = append(hist, tok)
		win := hist[max(0, len(hist)-7):]
		for v := int32(0); v < 10; v++ {
			c := 0
			for _, x := range win {
				if x == v {
					c++
				}
			}
			if s.Count(v) != c {
				t.Fatalf("step %d token %d: count %d, want %d", i, v, s.Count(v), c)
			}
		}
	}
}

func TestSampleAllocs(t *testing.T) {
	const v = 32000
	l := randLogits(v, 1)
	configs := map[string]Params{
		"all filters": {Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatPenalty: 1.1, RepeatLastN: 64, FrequencyPenalty: 0.1, PresencePenalty: 0.1},
		"top-p sort":  {Temperature: 0.8, TopP: 0.99, MinP: 0.01, RepeatPenalty: 1.1, RepeatLastN: 64},
		"greedy":      {Temperature: 0, TopP: 1, RepeatPenalty: 1.1, RepeatLastN: 64},
	}
	for name, p := range configs {
		s := mustNew(t, p, v)
		for i := 0; i < 100; i++ {
			s.Accept(int32(i * 7))
		}
		if a := testing.AllocsPerRun(20, func() { s.Sample(l) }); a != 0 {
			t.Errorf("%s: %v allocations per Sample", name, a)
		}
	}
	idx := make([]int32, 0, 10)
	if a := testing.AllocsPerRun(20, func() { idx = TopN(l, 10, idx) }); a != 0 {
		t.Errorf("TopN: %v allocations", a)
	}
	out := make([]float32, v)
	if a := testing.AllocsPerRun(20, func() { LogSoftmax(l, out) }); a != 0 {
		t.Errorf("LogSoftmax: %v allocations", a)
	}
}

func TestTopN(t *testing.T) {
	l := []float32{1, 5, 3, 5, float32(math.NaN()), 4, -2}
	got := TopN(l, 4, nil)
	want := []int32{1, 3, 5, 2}
	if len(got) != len(want) {
		t.Fatalf("TopN %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("TopN %v, want %v", got, want)
		}
	}
	if all := TopN(l, 100, nil); len(all) != len(l) || all[len(all)-1] != 4 {
		t.Fatalf("TopN over everything %v (NaN last)", all)
	}
	if g := TopN(l, 0, nil); len(g) != 0 {
		t.Fatalf("TopN 0: %v", g)
	}
	// Against a brute-force ranking.
	r := randLogits(3000, 4)
	for i := range r {
		r[i] = float32(math.Round(float64(r[i]))) // many ties
	}
	top := TopN(r, 300, nil)
	for i := 1; i < len(top); i++ {
		a, b := top[i-1], top[i]
		if r[a] < r[b] || (r[a] == r[b] && a > b) {
			t.Fatalf("TopN out of order at %d: %d (%v) before %d (%v)", i, a, r[a], b, r[b])
		}
	}
	cut := r[top[len(top)-1]]
	for id, x := range r {
		if x > cut {
			found := false
			for _, t2 := range top {
				if int(t2) == id {
					found = true
				}
			}
			if !found {
				t.Fatalf("token %d (%v) above the cut %v missing", id, x, cut)
			}
		}
	}
}

func TestLogSoftmax(t *testing.T) {
	l := []float32{1000, 999, 998, -1000}
	out := make([]float32, len(l))
	LogSoftmax(l, out)
	z := math.Log(1 + math.Exp(-1) + math.Exp(-2))
	want := []float64{-z, -1 - z, -2 - z, -2000 - z}
	for i := range out {
		if math.Abs(float64(out[i])-want[i]) > 1e-4 {
			t.Errorf("out[%d] = %v, want %v", i, out[i], want[i])
		}
	}
	var sum float64
	r := randLogits(1000, 2)
	o := make([]float32, 1000)
	LogSoftmax(r, o)
	for _, x := range o {
		sum += math.Exp(float64(x))
	}
	if math.Abs(sum-1) > 1e-5 {
		t.Fatalf("probabilities sum to %v", sum)
	}
	inf := float32(math.Inf(1))
	LogSoftmax([]float32{inf, 0, inf}, o)
	if math.Abs(float64(o[0])-math.Log(0.5)) > 1e-6 || !math.IsInf(float64(o[1]), -1) {
		t.Fatalf("+Inf logits: %v", o[:3])
	}
	ninf := float32(math.Inf(-1))
	LogSoftmax([]float32{ninf, ninf}, o)
	if !math.IsInf(float64(o[0]), -1) {
		t.Fatalf("all -Inf: %v", o[:2])
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultParams().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	nan := float32(math.NaN())
	cases := []struct {
		set  func(*Params)
		want string
	}{
		{func(p *Params) { p.Temperature = -0.1 }, "temperature"},
		{func(p *Params) { p.Temperature = nan }, "temperature"},
		{func(p *Params) { p.TopK = -1 }, "top_k"},
		{func(p *Params) { p.TopP = 0 }, "top_p"},
		{func(p *Params) { p.TopP = 1.01 }, "top_p"},
		{func(p *Params) { p.TopP = nan }, "top_p"},
		{func(p *Params) { p.MinP = -0.01 }, "min_p"},
		{func(p *Params) { p.MinP = 1.5 }, "min_p"},
		{func(p *Params) { p.RepeatPenalty = 0 }, "repeat_penalty"},
		{func(p *Params) { p.RepeatLastN = -2 }, "repeat_last_n"},
		{func(p *Params) { p.FrequencyPenalty = float32(math.Inf(1)) }, "frequency_penalty"},
		{func(p *Params) { p.PresencePenalty = nan }, "presence_penalty"},
	}
	for _, c := range cases {
		p := DefaultParams()
		c.set(&p)
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want error about %s, got %v", c.want, err)
		}
		if _, err := New(p, 10); err == nil {
			t.Errorf("New accepted invalid params (%s)", c.want)
		}
	}
	ok := DefaultParams()
	ok.Temperature, ok.TopP, ok.MinP, ok.TopK = 0, 1, 1, 0
	if err := ok.Validate(); err != nil {
		t.Fatalf("boundary values rejected: %v", err)
	}
	if _, err := New(DefaultParams(), 0); err == nil {
		t.Fatal("New accepted vocabulary 0")
	}
}

func TestDegenerateLogits(t *testing.T) {
	s := mustNew(t, DefaultParams(), 4)
	ninf := float32(math.Inf(-1))
	nan := float32(math.NaN())
	if got := s.Sample([]float32{ninf, ninf, ninf, ninf}); got != 0 {
		t.Fatalf("all -Inf: %d", got)
	}
	if got := s.Sample([]float32{nan, 1, nan, ninf}); got != 1 {
		t.Fatalf("NaN logits drawn: %d", got)
	}
	if got := s.Sample([]float32{0, float32(math.Inf(1)), 0, 0}); got != 1 {
		t.Fatalf("+Inf: %d", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("wrong-length logits did not panic")
		}
	}()
	s.Sample(make([]float32, 5))
}

func benchSample(b *testing.B, p Params) {
	const v = 150000
	l := randLogits(v, 1)
	s := mustNew(b, p, v)
	for i := 0; i < 64; i++ {
		s.Accept(int32(i * 13))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Sample(l)
	}
}

func BenchmarkSample150kDefaults(b *testing.B) { benchSample(b, DefaultParams()) }
func BenchmarkSample150kTopP(b *testing.B) {
	benchSample(b, Params{Temperature: 0.8, TopP: 0.95, RepeatPenalty: 1.1, RepeatLastN: 64})
}
func BenchmarkSample150kMinP(b *testing.B) {
	benchSample(b, Params{Temperature: 0.8, TopP: 1, MinP: 0.05, RepeatPenalty: 1, RepeatLastN: 64})
}
func BenchmarkSample150kGreedy(b *testing.B) {
	benchSample(b, Params{Temperature: 0, TopP: 1, RepeatPenalty: 1, RepeatLastN: 64})
}

// Argmax holds exactly where Sample is the logits' argmax whatever the
// history: greedy, with every penalty off or no window.
func TestSamplerArgmax(t *testing.T) {
	g := DefaultParams()
	g.Temperature = 0
	for _, c := range []struct {
		name string
		edit func(*Params)
		want bool
	}{
		{"greedy", func(*Params) {}, true},
		{"temperature", func(p *Params) { p.Temperature = 0.5 }, false},
		{"repeat penalty", func(p *Params) { p.RepeatPenalty = 1.1 }, false},
		{"frequency penalty", func(p *Params) { p.FrequencyPenalty = 0.2 }, false},
		{"presence penalty", func(p *Params) { p.PresencePenalty = 0.2 }, false},
		{"penalties without a window", func(p *Params) { p.RepeatPenalty, p.RepeatLastN = 1.1, 0 }, true},
	} {
		p := g
		c.edit(&p)
		s, err := New(p, 16)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Argmax(); got != c.want {
			t.Errorf("%s: Argmax %v, want %v", c.name, got, c.want)
		}
		if !c.want {
			continue
		}
		// then Sample is the argmax after any history
		l := []float32{0, 3, 1, 3, -2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		for _, tok := range []int32{1, 1, 3} {
			s.Accept(tok)
		}
		if got := s.Sample(l); got != 1 {
			t.Errorf("%s: Sample %d, want the argmax 1", c.name, got)
		}
	}
}
