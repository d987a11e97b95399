package kernel

import (
	"fmt"
	"math/rand/v2"
)

// BlockEpilogue is one kernel of producer and an epilogue that needs whole
// blocks of the producer's outputs (a quantizer of 32-value blocks, a
// norm's parts): the producer's grid loop runs as its own kernel would,
// and each of its groups (iteration g, which writes outputs g·rows to
// g·rows+rows−1) then counts its rows into its block's count (block
// outputs a block, cnt[g·rows/block]); the group that completes a block
// runs epilogue's grid loop body for it (iteration g·rows/block), reading
// what every group of the block wrote. So the epilogue needs no launch of
// its own and the producer keeps its grid, where LocalPhases holds a
// block's rows in one CTA until all are done. The counts only grow: a
// launch adds block to each block's count, so the completing group sees
// its old count plus rows a multiple of block, and nothing resets them
// between launches (block a multiple of rows, the producer's outputs whole
// blocks).
//
// Its parameters are the producer's, the epilogue's, then cnt: a U32
// buffer of a count a block, zero before the first launch. The interpreter
// (Run) runs the producer's groups in their order, each block's epilogue
// as its count completes, adding to the counts as a launch does;
// RunGroups runs the groups in a random order, which catches an epilogue
// that reads outputs of another block.
func BlockEpilogue(name string, block, rows int, producer, epilogue *Kernel) (*Kernel, error) {
	switch {
	case rows < 1 || block < rows || block%rows != 0:
		return nil, fmt.Errorf("kernel %s: blocks of %d outputs over groups of %d rows (a multiple of them)", name, block, rows)
	case len(producer.Phases) > 0 || len(epilogue.Phases) > 0:
		return nil, fmt.Errorf("kernel %s: a producer or epilogue of phases", name)
	case producer.Result != nil || epilogue.Result != nil:
		return nil, fmt.Errorf("kernel %s: a producer or epilogue returns a result (each stores what it computes)", name)
	}
	out := &Kernel{Name: name, Schedule: Schedule{}, Phases: []*Kernel{producer, epilogue}, Epilogue: &Epilogue{Block: block, Rows: rows}}
	out.Params = append(append(append(out.Params, producer.Params...), epilogue.Params...), Param{Buf: &Buf{Name: "cnt", Elem: U32}})
	out.Doc = fmt.Sprintf("%s, then %s a block of %d outputs by the group that completes it", producer.Name, epilogue.Name, block)
	return out, nil
}

// Epilogue is BlockEpilogue's shape: outputs a block, rows a producer
// group.
type Epilogue struct {
	Block, Rows int
}

// gridPhase is one phase of a kernel prepared for the interpreter, its
// grid loop's iterations run one at a time.
type gridPhase struct {
	m            *machine
	grid         *Stmt
	lo, hi, step int64
}

// iterations is the phase's grid loop's trip count.
func (p *gridPhase) iterations() int64 {
	if p.hi <= p.lo {
		return 0
	}
	return (p.hi - p.lo + p.step - 1) / p.step
}

// run runs iteration i (0 up) of the phase's grid loop.
func (p *gridPhase) run(i int64) {
	p.m.vars[p.grid.Var.ID] = val{i: p.lo + i*p.step}
	p.m.stmts(p.grid.Body)
}

// gridPhases prepares each phase of k over its arguments (per) for running
// its grid loop an iteration at a time: its lead-in run, its grid loop's
// bounds evaluated.
func gridPhases(k *Kernel, per [][]any) ([]gridPhase, error) {
	ps := make([]gridPhase, len(k.Phases))
	for i, p := range k.Phases {
		lk, m, err := prepare(p, per[i])
		if err != nil {
			return nil, fmt.Errorf("kernel %s: %w", k.Name, err)
		}
		at := -1
		for j, s := range lk.Body {
			if s.Op == SFor && s.Loop == Parallel {
				at = j
			}
		}
		if at < 0 {
			return nil, fmt.Errorf("kernel %s: phase %s has no grid loop", k.Name, p.Name)
		}
		m.stmts(lk.Body[:at]) // its pure lead-in
		g := lk.Body[at]
		ps[i] = gridPhase{m: m, grid: g, lo: m.eval(g.Lo).i, hi: m.eval(g.Hi).i, step: int64(g.Step)}
	}
	return ps, nil
}

// RunGroups interprets block epilogue kernel k (BlockEpilogue) as a GPU
// may run it: the producer's groups in a random order (from seed), each
// counting its rows into its block's count, and the group that completes
// a block then running the epilogue for it. Where the epilogue reads only
// its own block's outputs the results are Run's.
func RunGroups(k *Kernel, seed uint64, args ...any) error {
	return runGroups(k, func(n int) []int { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)).Perm(n) }, args)
}

// runGroups runs block epilogue kernel k's producer groups in the order
// order(n) gives for n of them (nil: their own).
func runGroups(k *Kernel, order func(n int) []int, args []any) (err error) {
	if k.Epilogue == nil {
		return fmt.Errorf("kernel %s: not a block epilogue", k.Name)
	}
	per, err := PhaseArgs(k, args)
	if err != nil {
		return err
	}
	cnt, ok := args[len(args)-1].([]uint32)
	if !ok {
		return fmt.Errorf("kernel %s: counts given a %T (a []uint32)", k.Name, args[len(args)-1])
	}
	defer recoverRun(k, &err)
	ps, err := gridPhases(k, per)
	if err != nil {
		return err
	}
	n := int(ps[0].iterations())
	var gs []int
	if order != nil {
		gs = order(n)
	} else {
		gs = make([]int, n)
		for i := range gs {
			gs[i] = i
		}
	}
	return countGroups(k, cnt, &ps[0], &ps[1], gs)
}

// countGroups runs the producer's groups in order, each counting its rows
// into cnt and, where it completes its block, running the epilogue for it.
func countGroups(k *Kernel, cnt []uint32, prod, epi *gridPhase, order []int) error {
	e := k.Epilogue
	for _, g := range order {
		b := int64(g) * int64(e.Rows) / int64(e.Block)
		if b >= int64(len(cnt)) || b >= epi.iterations() {
			return fmt.Errorf("kernel %s: group %d's block %d past the %d counts or the epilogue's %d blocks", k.Name, g, b, len(cnt), epi.iterations())
		}
		prod.run(int64(g))
		cnt[b] += uint32(e.Rows)
		if cnt[b]%uint32(e.Block) == 0 {
			epi.run(b)
		}
	}
	return nil
}
