// Package sample picks the next token from a logits vector the way users of
// llama.cpp and vLLM expect: repetition / frequency / presence penalties,
// top-k, top-p (nucleus), min-p and temperature, then a draw from the
// remaining distribution with the sampler's own seeded PRNG.
//
// # Order
//
// Sample applies, in llama.cpp's default sampler-chain order:
//
//	penalties -> top_k -> top_p -> min_p -> temperature -> dist
//
// so top-p and min-p see the probabilities at temperature 1 (after
// penalties), and temperature only reshapes the distribution over the tokens
// that survived the filters. A temperature <= 0 is greedy: the argmax of the
// penalized logits (lowest id wins ties); the filters cannot change it and no
// random number is drawn.
//
// # Penalties
//
// Penalties follow llama.cpp (llama_sampler_penalties): over the last
// RepeatLastN accepted tokens (-1: every accepted token, 0: none), a token seen
// c > 0 times has its logit l changed to
//
//	l' = (l > 0 ? l/RepeatPenalty : l*RepeatPenalty) - c*FrequencyPenalty - PresencePenalty
//
// The frequency and presence terms are OpenAI's; as in llama.cpp they count
// over the same window as the repetition penalty (set RepeatLastN to -1 for
// OpenAI's whole-history counting). Only tokens given to Accept count: the
// caller decides whether prompt tokens do.
//
// # Determinism and cost
//
// A Sampler with a given Seed draws the same tokens for the same logits and
// the same Accept calls; each non-greedy Sample consumes exactly one number
// from a PCG generator (math/rand/v2). Sample never modifies its argument and
// does not allocate: every buffer is sized by New. With top-k set, candidates
// are chosen by a bounded heap (O(V log k)); top-p without top-k first tries
// growing partial selections and falls back to a full sort only when the
// nucleus is large. A Sampler is not safe for concurrent use.
package sample

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Params configures a Sampler. The zero value is not valid (TopP 0); start
// from DefaultParams.
type Params struct {
	Temperature      float32 // <= 0 means greedy (argmax, lowest id wins ties); negative is rejected by Validate
	TopK             int     // keep the K most likely tokens; 0 = off
	TopP             float32 // keep the smallest prefix whose probability reaches TopP; 1 = off
	MinP             float32 // drop tokens less likely than MinP times the most likely; 0 = off
	RepeatPenalty    float32 // 1 = off; positive logits divided, negative multiplied
	RepeatLastN      int     // penalty window in accepted tokens; -1 = whole history, 0 = penalties off
	FrequencyPenalty float32 // subtract count*FrequencyPenalty
	PresencePenalty  float32 // subtract PresencePenalty once if count > 0
	Seed             uint64
}

// DefaultParams returns llama.cpp's defaults (temperature 0.8, top-k 40,
// top-p 0.95, min-p 0.05, penalties off with a 64-token window) and seed 0,
// so that an unconfigured sampler is reproducible.
func DefaultParams() Params {
	return Params{
		Temperature:   0.8,
		TopK:          40,
		TopP:          0.95,
		MinP:          0.05,
		RepeatPenalty: 1,
		RepeatLastN:   64,
	}
}

func finite(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }

// Validate reports the first invalid field.
func (p Params) Validate() error {
	var errs []error
	if !finite(p.Temperature) || p.Temperature < 0 {
		errs = append(errs, fmt.Errorf("temperature %v: must be a finite number >= 0 (0 = greedy)", p.Temperature))
	}
	if p.TopK < 0 {
		errs = append(errs, fmt.Errorf("top_k %d: must be >= 0 (0 = off)", p.TopK))
	}
	if !(p.TopP > 0 && p.TopP <= 1) {
		errs = append(errs, fmt.Errorf("top_p %v: must be in (0, 1] (1 = off)", p.TopP))
	}
	if !(p.MinP >= 0 && p.MinP <= 1) {
		errs = append(errs, fmt.Errorf("min_p %v: must be in [0, 1] (0 = off)", p.MinP))
	}
	if !finite(p.RepeatPenalty) || p.RepeatPenalty <= 0 {
		errs = append(errs, fmt.Errorf("repeat_penalty %v: must be a finite number > 0 (1 = off)", p.RepeatPenalty))
	}
	if p.RepeatLastN < -1 {
		errs = append(errs, fmt.Errorf("repeat_last_n %d: must be >= -1 (-1 = whole history, 0 = off)", p.RepeatLastN))
	}
	if !finite(p.FrequencyPenalty) {
		errs = append(errs, fmt.Errorf("frequency_penalty %v: must be finite", p.FrequencyPenalty))
	}
	if !finite(p.PresencePenalty) {
		errs = append(errs, fmt.Errorf("presence_penalty %v: must be finite", p.PresencePenalty))
	}
	if len(errs) > 0 {
		return fmt.Errorf("sample: %w", errors.Join(errs...))
	}
	return nil
}

// penalized reports whether any penalty can change a logit.
func (p Params) penalized() bool {
	return p.RepeatLastN != 0 && (p.RepeatPenalty != 1 || p.FrequencyPenalty != 0 || p.PresencePenalty != 0)
}

// Sampler draws tokens for one sequence.
type Sampler struct {
	p     Params
	vocab int
	pcg   *rand.PCG
	rng   *rand.Rand

	buf []float32 // working copy of the logits
	idx []int32   // candidate ids
	w   []float64 // candidate weights for the final draw
	srt byLogit

	// Penalty state: the window's tokens (a ring when RepeatLastN > 0),
	// per-token counts over the window, and the distinct tokens with a
	// non-zero count (pos[t] is t's index in distinct).
	ring     []int32
	head     int
	filled   int
	counts   []int32
	distinct []int32
	pos      []int32
}

// New returns a sampler for logits of length vocabSize.
func New(p Params, vocabSize int) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if vocabSize <= 0 || vocabSize > math.MaxInt32 {
		return nil, fmt.Errorf("sample: vocabulary size %d out of range", vocabSize)
	}
	s := &Sampler{
		p:     p,
		vocab: vocabSize,
		pcg:   rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15),
		buf:   make([]float32, vocabSize),
		idx:   make([]int32, vocabSize),
		w:     make([]float64, vocabSize),
	}
	s.rng = rand.New(s.pcg)
	if p.penalized() {
		s.counts = make([]int32, vocabSize)
		s.pos = make([]int32, vocabSize)
		if p.RepeatLastN > 0 {
			s.ring = make([]int32, p.RepeatLastN)
			s.distinct = make([]int32, 0, min(p.RepeatLastN, vocabSize))
		}
	}
	return s, nil
}

// Params returns the sampler's parameters.
func (s *Sampler) Params() Params { return s.p }

// Reset forgets the history and reseeds the generator, so the sampler draws
// exactly as a fresh one from New would.
func (s *Sampler) Reset() {
	for _, t := range s.distinct {
		s.counts[t] = 0
	}
	s.distinct = s.distinct[:0]
	s.head, s.filled = 0, 0
	s.pcg.Seed(s.p.Seed, s.p.Seed^0x9e3779b97f4a7c15)
}

// Accept records tok in the history the penalties look at. Ids outside the
// vocabulary are ignored. With RepeatLastN -1 the history grows without bound
// (it is kept as counts, so memory stays O(vocabulary)).
func (s *Sampler) Accept(tok int32) {
	if s.counts == nil || tok < 0 || int(tok) >= s.vocab {
		return
	}
	if s.ring != nil {
		if s.filled == len(s.ring) {
			s.dec(s.ring[s.head])
		} else {
			s.filled++
		}
		s.ring[s.head] = tok
		s.head++
		if s.head == len(s.ring) {
			s.head = 0
		}
	}
	if s.counts[tok] == 0 {
		s.pos[tok] = int32(len(s.distinct))
		s.distinct = append(s.distinct, tok)
	}
	s.counts[tok]++
}

func (s *Sampler) dec(t int32) {
	s.counts[t]--
	if s.counts[t] == 0 {
		i := s.pos[t]
		last := s.distinct[len(s.distinct)-1]
		s.distinct[i] = last
		s.pos[last] = i
		s.distinct = s.distinct[:len(s.distinct)-1]
	}
}

// Count is how many times tok occurs in the penalty window.
func (s *Sampler) Count(tok int32) int {
	if s.counts == nil || tok < 0 || int(tok) >= s.vocab {
		return 0
	}
	return int(s.counts[tok])
}

// Argmax reports whether Sample returns the lowest id of the largest of
// the logits whatever the history (greedy with the penalties off), so a
// runner may choose the token where the logits are (runtime/generate's
// device greedy) instead of handing them to Sample. A NaN logit counts as
// −Inf here; such a runner's own argmax need not agree on NaNs.
func (s *Sampler) Argmax() bool {
	p := s.p
	return p.Temperature <= 0 && (p.RepeatLastN == 0 || p.RepeatPenalty == 1 && p.FrequencyPenalty == 0 && p.PresencePenalty == 0)
}

// applyPenalties changes l (indexed by token id) in place.
func (s *Sampler) applyPenalties(l []float32) {
	rp, fp, pp := s.p.RepeatPenalty, s.p.FrequencyPenalty, s.p.PresencePenalty
	for _, t := range s.distinct {
		c := s.counts[t]
		x := l[t]
		if rp != 1 {
			if x > 0 {
				x /= rp
			} else {
				x *= rp
			}
		}
		x -= float32(float32(c)*fp) + pp
		l[t] = x
	}
}

// Sample returns the next token for logits (length vocabSize; it is not
// modified). It does not record the token: call Accept for that.
func (s *Sampler) Sample(logits []float32) int32 {
	if len(logits) != s.vocab {
		panic(fmt.Sprintf("sample: %d logits for a vocabulary of %d", len(logits), s.vocab))
	}
	buf := s.buf
	maxv := float32(math.Inf(-1))
	for i, x := range logits {
		if x != x {
			x = float32(math.Inf(-1))
		}
		buf[i] = x
	}
	if len(s.distinct) > 0 {
		s.applyPenalties(buf)
	}
	best := int32(0)
	for i, x := range buf {
		if x > maxv {
			maxv, best = x, int32(i)
		}
	}
	if s.p.Temperature <= 0 || math.IsInf(float64(maxv), 0) {
		// Greedy, or a degenerate vector (all -Inf, or +Inf present) that
		// has no finite distribution: the lowest-id maximum.
		return best
	}
	m := float64(maxv)

	// Candidates: idx[:n], sorted best-first when sorted is set.
	n, sorted := s.vocab, false
	if k := s.p.TopK; k > 0 && k < s.vocab {
		n, sorted = len(selectTop(buf, k, s.idx[:0])), true
	}
	if !sorted {
		for i := range s.idx {
			s.idx[i] = int32(i)
		}
	}

	if top := float64(s.p.TopP); top < 1 {
		var z float64
		for _, id := range s.idx[:n] {
			z += math.Exp(float64(buf[id]) - m)
		}
		target := top * z
		if sorted {
			n, _ = nucleus(buf, s.idx[:n], m, target)
		} else {
			// Grow a partial selection until it holds the nucleus; sort
			// everything once the selection would be a large part of it.
			for k := 256; ; k *= 8 {
				if k >= n/4 {
					for i := range s.idx { // a failed selection reordered a prefix
						s.idx[i] = int32(i)
					}
					s.srt = byLogit{idx: s.idx[:n], keys: buf}
					sort.Sort(&s.srt)
					s.srt = byLogit{}
					n, _ = nucleus(buf, s.idx[:n], m, target)
					break
				}
				sel := selectTop(buf, k, s.idx[:0])
				if c, ok := nucleus(buf, sel, m, target); ok {
					n = c
					break
				}
			}
			sorted = true
		}
	}

	if mp := s.p.MinP; mp > 0 {
		minLogit := m + math.Log(float64(mp))
		j := 0
		for _, id := range s.idx[:n] {
			if float64(buf[id]) >= minLogit {
				s.idx[j] = id
				j++
			}
		}
		n = j // the maximum always passes, so n >= 1
	}

	// Temperature, then the draw.
	inv := 1 / float64(s.p.Temperature)
	var total float64
	w := s.w[:n]
	for j, id := range s.idx[:n] {
		e := math.Exp(float64((float64(buf[id]) - m) * inv))
		total += e
		w[j] = total
	}
	if !(total > 0) || math.IsInf(total, 0) {
		// Extreme temperatures underflow or overflow the weights.
		return best
	}
	u := s.rng.Float64() * total
	// w holds the running sums: find the first above u.
	lo, hi := 0, n-1
	for lo < hi {
		mid := (lo + hi) / 2
		if w[mid] > u {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return s.idx[lo]
}

// nucleus returns how many of the best-first ids are needed for their
// weights exp(l-m) to reach target (at least 1), and whether they reach it.
func nucleus(l []float32, ids []int32, m, target float64) (int, bool) {
	var cum float64
	for i, id := range ids {
		cum += math.Exp(float64(l[id]) - m)
		if cum >= target {
			return i + 1, true
		}
	}
	return len(ids), false
}

// better orders ids best-first: higher logit, NaN lowest, ties to the lower id.
func better(l []float32, a, b int32) bool {
	x, y := l[a], l[b]
	if x > y || (y != y && x == x) {
		return true
	}
	if x < y || (x != x && y == y) {
		return false
	}
	return a < b
}

type byLogit struct {
	idx  []int32
	keys []float32
}

func (b *byLogit) Len() int           { return len(b.idx) }
func (b *byLogit) Less(i, j int) bool { return better(b.keys, b.idx[i], b.idx[j]) }
func (b *byLogit) Swap(i, j int)      { b.idx[i], b.idx[j] = b.idx[j], b.idx[i] }

// selectTop appends to out[:0] the k best ids of l, best first, using a
// bounded min-heap (O(len(l) log k)); it allocates only if cap(out) < k.
func selectTop(l []float32, k int, out []int32) []int32 {
	out = out[:0]
	k = min(k, len(l))
	if k <= 0 {
		return out
	}
	for i := 0; i < k; i++ {
		out = append(out, int32(i))
	}
	h := out
	// Min-heap by "better": h[0] is the worst kept id.
	for i := k/2 - 1; i >= 0; i-- {
		siftDown(l, h, i, k)
	}
	for i := k; i < len(l); i++ {
		id := int32(i)
		if better(l, id, h[0]) {
			h[0] = id
			siftDown(l, h, 0, k)
		}
	}
	for end := k - 1; end > 0; end-- {
		h[0], h[end] = h[end], h[0]
		siftDown(l, h, 0, end)
	}
	return out
}

func siftDown(l []float32, h []int32, i, n int) {
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && better(l, h[c], h[c+1]) {
			c++ // the worse child
		}
		if !better(l, h[i], h[c]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// TopN appends to idx[:0] the n ids with the highest logits, highest first,
// ties to the lower id (NaN ranks lowest). It allocates only when cap(idx) < n.
func TopN(logits []float32, n int, idx []int32) []int32 {
	return selectTop(logits, n, idx)
}

// Argmax returns the id of the highest logit, the lowest id on ties, ignoring
// NaN. It returns -1 for an empty slice and 0 when every entry is NaN.
func Argmax(logits []float32) int32 {
	if len(logits) == 0 {
		return -1
	}
	best := int32(-1)
	var bv float32
	for i, x := range logits {
		if x != x {
			continue
		}
		if best < 0 || x > bv {
			best, bv = int32(i), x
		}
	}
	if best < 0 {
		return 0
	}
	return best
}

// LogSoftmax writes log(softmax(logits)) to out (len(out) >= len(logits)),
// accumulating in float64 after subtracting the maximum. -Inf logits get
// -Inf; NaN logits give NaN and are left out of the normalization. If some
// logit is +Inf, the +Inf entries share the probability equally; if every
// logit is -Inf (or NaN), every output is -Inf (or NaN).
func LogSoftmax(logits []float32, out []float32) {
	if len(out) < len(logits) {
		panic(fmt.Sprintf("sample: LogSoftmax output has %d entries for %d logits", len(out), len(logits)))
	}
	out = out[:len(logits)]
	m := math.Inf(-1)
	for _, x := range logits {
		if float64(x) > m {
			m = float64(x)
		}
	}
	negInf := float32(math.Inf(-1))
	nan := float32(math.NaN())
	switch {
	case math.IsInf(m, 1):
		var c float64
		for _, x := range logits {
			if math.IsInf(float64(x), 1) {
				c++
			}
		}
		lc := float32(-math.Log(c))
		for i, x := range logits {
			switch {
			case x != x:
				out[i] = nan
			case math.IsInf(float64(x), 1):
				out[i] = lc
			default:
				out[i] = negInf
			}
		}
		return
	case math.IsInf(m, -1):
		for i, x := range logits {
			if x != x {
				out[i] = nan
			} else {
				out[i] = negInf
			}
		}
		return
	}
	var z float64
	for _, x := range logits {
		if x == x {
			z += math.Exp(float64(x) - m)
		}
	}
	lz := m + math.Log(z)
	for i, x := range logits {
		out[i] = float32(float64(x) - lz)
	}
}
