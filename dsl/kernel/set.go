package kernel

// Set assigns e to accumulator acc: a loop-carried value that is not a
// fold (a running maximum that decides other updates, an online softmax's
// rescaled sum). Reads of acc after it see e. e must have acc's kind and,
// as with Fold, be in acc's ParallelFor iteration.
func (b *Builder) Set(acc *Var, e Expr) {
	switch {
	case !b.check("set "+acc.Name, e):
	case acc.Role != RoleAcc:
		b.fail("set of %s, which is not an accumulator", acc.Name)
	case e.Kind != acc.Kind:
		b.fail("set of %s into %s accumulator %s", e.Kind, acc.Kind, acc.Name)
	case acc.par != b.par:
		b.fail("set of %s across a ParallelFor", acc.Name)
	default:
		b.emit(&Stmt{Op: SSet, Var: acc, Value: e})
	}
}
