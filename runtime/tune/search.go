package tune

// Space is where the candidates of one op shape lie.
type Space struct {
	Def        Params // the built-in default (what Off runs)
	RowAlign   int    // Rows is a multiple of this (the kernel's tile width)
	XAlign     int    // XRows is a multiple of this (the kernel's tile height)
	MaxRows    int    // the op's weight rows
	MaxXRows   int    // the op's activation rows (1: decode, XRows is not searched)
	MaxWorkers int
	// Prefetches are the prefetch distances to try beside Def.Prefetch
	// (the kernel's decode rows prefetch weights; empty: not searched)
	Prefetches []int
}

// Candidates lists the parameters to measure for mode, the default first,
// each clamped to the space and listed once.
func (s Space) Candidates(mode Mode) []Params {
	def := s.clamp(s.Def)
	out := []Params{def}
	if mode == Off {
		return out
	}
	add := func(p Params) {
		p = s.clamp(p)
		for _, q := range out {
			if q == p {
				return
			}
		}
		out = append(out, p)
	}
	rowF, xF := []float64{0.5, 2}, []float64{0.5, 2}
	if mode == Full {
		rowF, xF = []float64{0.25, 0.5, 1, 2, 4}, []float64{0.25, 0.5, 1, 2}
	}
	workers := []int{def.Workers}
	if s.MaxWorkers > 1 {
		workers = append(workers, 1)
	}
	scale := func(v int, f float64) int { return max(1, int(float64(v)*f+0.5)) }
	if mode == Quick {
		// one parameter moved from the default at a time
		vary := func(edit func(*Params)) {
			p := def
			edit(&p)
			add(p)
		}
		for _, f := range rowF {
			vary(func(p *Params) { p.Rows = scale(def.Rows, f) })
		}
		if s.MaxXRows > 1 {
			for _, f := range xF {
				vary(func(p *Params) { p.XRows = scale(def.XRows, f) })
			}
		}
		for _, w := range workers[1:] {
			vary(func(p *Params) { p.Workers = w })
		}
		for _, pf := range s.Prefetches {
			vary(func(p *Params) { p.Prefetch = pf })
		}
		return out
	}
	if s.MaxXRows <= 1 {
		xF = []float64{1}
	}
	prefetches := append([]int{def.Prefetch}, s.Prefetches...)
	for _, w := range workers {
		for _, rf := range rowF {
			for _, xf := range xF {
				for _, pf := range prefetches {
					add(Params{Rows: scale(def.Rows, rf), XRows: scale(def.XRows, xf), Workers: w, Prefetch: pf})
				}
			}
		}
	}
	return out
}

// Rounds is how many calls of the op the measurement spans (each candidate
// is timed once a call, on a rotating share of the work).
func (m Mode) Rounds() int {
	switch m {
	case Full:
		return 4
	case Quick:
		return 2
	}
	return 0
}

// clamp rounds p into the space: Rows and XRows to their alignments and
// bounds, Workers to 1..MaxWorkers.
func (s Space) clamp(p Params) Params {
	align := func(v, a, hi int) int {
		a = max(a, 1)
		v = max(a, (v+a/2)/a*a)
		if hi > 0 && v > hi {
			v = max(hi, 1)
		}
		return v
	}
	p.Rows = align(p.Rows, s.RowAlign, s.MaxRows)
	if s.MaxXRows <= 1 {
		p.XRows = 1
	} else {
		p.XRows = align(p.XRows, s.XAlign, s.MaxXRows)
	}
	p.Workers = min(max(p.Workers, 1), max(s.MaxWorkers, 1))
	return p
}
