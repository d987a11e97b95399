package kernel

import "fmt"

// Phases is one kernel that runs ks in turn, each a phase that starts only
// when the one before has finished everywhere. A GPU target renders it as
// one launch whose phases a grid-wide barrier separates, so a chain of
// short kernels (a decode step's norm, mat-vecs, quantizers) streams without
// launch boundaries; the interpreter runs the phases one after another, so
// the results are each phase's own, bit for bit.
//
// Its parameters are each phase's in turn, then the barrier: a U32 buffer
// of two words, zero before the first launch, that a target counts the
// phases' arrivals in (and leaves ready for the next launch); the
// interpreter does not touch it. A kernel may be a phase more than once.
func Phases(name string, ks ...*Kernel) (*Kernel, error) {
	if len(ks) < 2 {
		return nil, fmt.Errorf("kernel %s: phases of %d kernels (two or more)", name, len(ks))
	}
	out := &Kernel{Name: name, Schedule: Schedule{}, Phases: ks}
	for _, k := range ks {
		switch {
		case len(k.Phases) > 0:
			return nil, fmt.Errorf("kernel %s: phase %s has phases of its own", name, k.Name)
		case k.Result != nil:
			return nil, fmt.Errorf("kernel %s: phase %s returns a result (a phase stores what it computes)", name, k.Name)
		}
		out.Params = append(out.Params, k.Params...)
	}
	out.Params = append(out.Params, Param{Buf: &Buf{Name: "barrier", Elem: U32}})
	out.Doc = fmt.Sprintf("%d phases: ", len(ks))
	for i, k := range ks {
		if i > 0 {
			out.Doc += ", "
		}
		out.Doc += k.Name
	}
	return out, nil
}

// PhaseArgs splits a phased kernel's arguments (or any values that follow
// its Params) into each phase's; the last, the barrier's, is left out (a
// local phased kernel, LocalPhases, has none).
func PhaseArgs[T any](k *Kernel, args []T) ([][]T, error) {
	if len(args) != len(k.Params) {
		return nil, fmt.Errorf("kernel %s: %d arguments for %d parameters", k.Name, len(args), len(k.Params))
	}
	var out [][]T
	at := 0
	for _, p := range k.Phases {
		out = append(out, args[at:at+len(p.Params)])
		at += len(p.Params)
	}
	return out, nil
}
