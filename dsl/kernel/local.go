package kernel

import "fmt"

// LocalPhases is one kernel that runs ks in turn over the same CTAs of cta
// threads with only a CTA barrier between the phases, not a grid's: a
// later phase may read what its own CTA wrote in the phases before and
// nothing the other CTAs wrote. Each phase's grid loop hands a CTA
// shares[i] consecutive groups of its iterations at a time (0: as many as
// the CTA holds, cta over the phase's width), the next shares[i] after a
// stride of every CTA's; so a producer of 32 rows a CTA (16 groups of 2)
// and an epilogue of one block a CTA (one group, shares 1) meet in the
// same CTA, and the epilogue needs no launch of its own.
//
// The interpreter runs the phases one after another, as Phases does; the
// CTA-local contract (each phase reads only its own CTA's writes) is what
// RunCTAs checks, running the CTAs one after another instead. Its
// parameters are each phase's in turn.
func LocalPhases(name string, cta int, shares []int, ks ...*Kernel) (*Kernel, error) {
	switch {
	case len(ks) < 2:
		return nil, fmt.Errorf("kernel %s: local phases of %d kernels (two or more)", name, len(ks))
	case len(shares) != len(ks):
		return nil, fmt.Errorf("kernel %s: %d shares for %d phases", name, len(shares), len(ks))
	case cta < 64 || cta > MaxThreads || cta%32 != 0:
		return nil, fmt.Errorf("kernel %s: a CTA of %d threads (a multiple of 32 from 64 to %d)", name, cta, MaxThreads)
	}
	out := &Kernel{Name: name, Schedule: Schedule{}, Phases: ks, Local: &Local{CTA: cta, Shares: shares}}
	out.Doc = fmt.Sprintf("%d CTA-local phases: ", len(ks))
	for i, k := range ks {
		switch {
		case len(k.Phases) > 0:
			return nil, fmt.Errorf("kernel %s: phase %s has phases of its own", name, k.Name)
		case k.Result != nil:
			return nil, fmt.Errorf("kernel %s: phase %s returns a result (a phase stores what it computes)", name, k.Name)
		case shares[i] < 0:
			return nil, fmt.Errorf("kernel %s: phase %s's share %d", name, k.Name, shares[i])
		}
		if w := kernelWidth(k); shares[i]*w > cta || w > cta {
			return nil, fmt.Errorf("kernel %s: phase %s: %d groups of %d threads in a CTA of %d", name, k.Name, max(shares[i], 1), w, cta)
		}
		out.Params = append(out.Params, k.Params...)
		if i > 0 {
			out.Doc += ", "
		}
		out.Doc += k.Name
	}
	return out, nil
}

// Local is LocalPhases' launch shape: the CTA's threads and each phase's
// groups a CTA (0: all it holds).
type Local struct {
	CTA    int
	Shares []int
}

// Groups is phase i's groups a CTA, each of width threads.
func (l *Local) Groups(i, width int) int {
	if l.Shares[i] > 0 {
		return l.Shares[i]
	}
	return l.CTA / width
}

// kernelWidth is the width of k's cooperative loops (1 without).
func kernelWidth(k *Kernel) int {
	w := 1
	for _, ls := range k.Schedule {
		w = max(w, ls.Threads)
	}
	return w
}

// RunCTAs interprets local phased kernel k as a launch of ctas CTAs runs
// it on a GPU where no two CTAs overlap: CTA 0 through every phase (each
// phase's grid loop at the iterations the CTA takes), then CTA 1, and so
// on. Where every phase reads only its own CTA's writes, the results are
// Run's; a phase that reads another CTA's sees it unwritten (or, where it
// reads what a CTA before it wrote, written), so comparing the two catches
// a broken contract.
func RunCTAs(k *Kernel, ctas int, args ...any) (err error) {
	if k.Local == nil {
		return fmt.Errorf("kernel %s: not local phases", k.Name)
	}
	if ctas < 1 {
		return fmt.Errorf("kernel %s: %d CTAs", k.Name, ctas)
	}
	per, err := PhaseArgs(k, args)
	if err != nil {
		return err
	}
	defer recoverRun(k, &err)
	ps, err := gridPhases(k, per)
	if err != nil {
		return err
	}
	groups := make([]int64, len(ps))
	for i, p := range k.Phases {
		groups[i] = int64(k.Local.Groups(i, kernelWidth(p)))
	}
	for c := int64(0); c < int64(ctas); c++ {
		for i := range ps {
			p, n, gs := &ps[i], ps[i].iterations(), groups[i]
			for base := c * gs; base < n; base += int64(ctas) * gs {
				for w := base; w < min(base+gs, n); w++ {
					p.run(w)
				}
			}
		}
	}
	return nil
}
