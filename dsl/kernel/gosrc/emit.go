package gosrc

import (
	"fmt"
	"go/token"
	"strings"

	"github.com/jitllm/jitllm/dsl/kernel"
)

// fn renders one kernel.
type fn struct {
	k       *kernel.Kernel
	vars    map[*kernel.Var]string
	bufs    map[*kernel.Buf]string
	used    map[string]bool
	scope   []any       // Vars and Bufs declared in open scopes, nil-separated
	reads   map[any]int // reads of each Var and Buf, to drop dead Lets and Views
	deadSet map[*kernel.Stmt]bool
	imports map[string]bool
	helpers map[string]bool
	out     strings.Builder
	depth   int
	err     error
}

// reserved are the names the generated code calls.
var reserved = map[string]bool{"len": true, "min": true, "max": true, "math": true, "sel": true, "f16tof32": true, "f32tof16": true}

func (f *fn) fail(format string, args ...any) {
	if f.err == nil {
		f.err = fmt.Errorf("gosrc: kernel %s: "+format, append([]any{f.k.Name}, args...)...)
	}
}

// ident gives a Go identifier for name, unique in the function.
func (f *fn) ident(name string) string {
	id := name
	for n := 2; f.used[id] || reserved[id] || token.IsKeyword(id) || goTypeName(id); n++ {
		id = fmt.Sprintf("%s%d", name, n)
	}
	f.used[id] = true
	return id
}

func goTypeName(s string) bool {
	for _, t := range goTypes {
		if t == s {
			return true
		}
	}
	return s == "byte"
}

// Func renders k, under the Go target's form of its schedule overridden by
// o, as a Go function declaration. It returns the imports and helpers the
// code uses.
func Func(k *kernel.Kernel, o kernel.Schedule) (src string, imports, helpers map[string]bool, err error) {
	lk, err := kernel.Apply(k, schedule(k, o))
	if err != nil {
		return "", nil, nil, err
	}
	f := &fn{k: lk, vars: map[*kernel.Var]string{}, bufs: map[*kernel.Buf]string{}, used: map[string]bool{},
		imports: map[string]bool{}, helpers: map[string]bool{}}
	f.liveness()
	if lk.Doc != "" {
		f.line("// %s %s", lk.Name, lk.Doc)
	}
	var params []string
	for _, p := range lk.Params {
		if p.Buf != nil {
			f.bufs[p.Buf] = f.ident(p.Buf.Name)
			params = append(params, f.bufs[p.Buf]+" []"+sliceElem(p.Buf.Elem))
		} else {
			f.vars[p.Var] = f.ident(p.Var.Name)
			params = append(params, f.vars[p.Var]+" "+goTypes[p.Var.Kind])
		}
	}
	if lk.Result == nil {
		f.line("func %s(%s) {", lk.Name, strings.Join(params, ", "))
		f.stmts(lk.Body)
	} else {
		// the result reads the body's top-level accumulators, so the body's
		// scope stays open for the return
		f.line("func %s(%s) %s {", lk.Name, strings.Join(params, ", "), goTypes[lk.Result.Kind])
		f.depth++
		f.scope = append(f.scope, nil)
		for _, s := range lk.Body {
			if !f.dead(s) {
				f.stmt(s)
			}
		}
		f.line("return %s", f.bare(lk.Result))
		f.closeScope()
		f.depth--
	}
	f.line("}")
	return f.out.String(), f.imports, f.helpers, f.err
}

func sliceElem(k kernel.Kind) string {
	if k == kernel.U8 {
		return "byte"
	}
	return goTypes[k]
}

func (f *fn) line(format string, args ...any) {
	f.out.WriteString(strings.Repeat("\t", f.depth))
	fmt.Fprintf(&f.out, format, args...)
	f.out.WriteByte('\n')
}

// liveness counts reads, dropping Lets and Views nobody reads (Go rejects
// unused locals, and unrolling with constants leaves some).
func (f *fn) liveness() {
	for {
		f.reads = map[any]int{}
		var walk func(ss []*kernel.Stmt)
		var expr func(e kernel.Expr)
		expr = func(e kernel.Expr) {
			if e == nil {
				return
			}
			if e.Var != nil {
				f.reads[e.Var]++
			}
			if e.Buf != nil {
				f.reads[e.Buf]++
			}
			for _, a := range e.Args {
				expr(a)
			}
		}
		walk = func(ss []*kernel.Stmt) {
			for _, s := range ss {
				if f.dead(s) {
					continue
				}
				expr(s.Value)
				expr(s.Index)
				expr(s.Lo)
				expr(s.Hi)
				if s.Op == kernel.SStore {
					f.reads[s.Buf]++
				}
				if s.Op == kernel.SView {
					f.reads[s.Buf.Parent]++
				}
				walk(s.Body)
			}
		}
		before := len(f.deadSet)
		walk(f.k.Body)
		expr(f.k.Result)
		for _, s := range f.allStmts(f.k.Body) {
			if (s.Op == kernel.SLet && f.reads[s.Var] == 0) || (s.Op == kernel.SView && f.reads[s.Buf] == 0) {
				f.markDead(s)
			}
		}
		if len(f.deadSet) == before {
			return
		}
	}
}

func (f *fn) dead(s *kernel.Stmt) bool { return f.deadSet[s] }

func (f *fn) markDead(s *kernel.Stmt) {
	if f.deadSet == nil {
		f.deadSet = map[*kernel.Stmt]bool{}
	}
	f.deadSet[s] = true
}

func (f *fn) allStmts(ss []*kernel.Stmt) []*kernel.Stmt {
	var out []*kernel.Stmt
	for _, s := range ss {
		out = append(out, s)
		out = append(out, f.allStmts(s.Body)...)
	}
	return out
}

// stmts renders a scope. Names declared in it are released at its end, so
// sibling loops reuse "i"; the next declaration of a Var names it afresh.
func (f *fn) stmts(ss []*kernel.Stmt) {
	f.scope = append(f.scope, nil)
	for _, s := range ss {
		if !f.dead(s) {
			f.stmt(s)
		}
	}
	f.closeScope()
}

type nameOnly string

// closeScope releases what the innermost scope declared.
func (f *fn) closeScope() {
	for {
		x := f.scope[len(f.scope)-1]
		f.scope = f.scope[:len(f.scope)-1]
		switch x := x.(type) {
		case nameOnly:
			delete(f.used, string(x))
		case *kernel.Var:
			delete(f.used, f.vars[x])
			delete(f.vars, x)
		case *kernel.Buf:
			delete(f.used, f.bufs[x])
			delete(f.bufs, x)
		}
		if x == nil {
			return
		}
	}
}

func (f *fn) declVar(v *kernel.Var) string {
	f.vars[v] = f.ident(v.Name)
	f.scope = append(f.scope, v)
	return f.vars[v]
}

func (f *fn) stmt(s *kernel.Stmt) {
	switch s.Op {
	case kernel.SLet, kernel.SAcc:
		val := f.bare(s.Value)
		f.line("%s := %s", f.declVar(s.Var), val)
	case kernel.SFold:
		v, x := f.vars[s.Var], f.expr(s.Value)
		switch s.Var.Fold {
		case kernel.OpAdd:
			f.line("%s = %s(%s + %s)", v, goTypes[s.Var.Kind], v, x)
		default:
			f.line("%s = %s(%s, %s)", v, s.Var.Fold, v, x)
		}
	case kernel.SSet:
		f.line("%s = %s", f.vars[s.Var], f.bare(s.Value))
	case kernel.SStore:
		f.line("%s[%s] = %s", f.bufs[s.Buf], f.bare(s.Index), f.bare(s.Value))
	case kernel.SView:
		// the conversion checks the window's bounds once
		src := fmt.Sprintf("(*[%d]%s)(%s[%s:])", s.Buf.Size, sliceElem(s.Buf.Elem), f.bufs[s.Buf.Parent], f.bare(s.Index))
		f.bufs[s.Buf] = f.ident(s.Buf.Name)
		f.scope = append(f.scope, s.Buf)
		f.line("%s := %s", f.bufs[s.Buf], src)
	case kernel.SFor:
		if s.Threads > 1 { // its order is a tree over threads this target does not model
			f.fail("loop %s: Threads %d (cooperative loops are for GPU targets)", s.Var.Name, s.Threads)
			return
		}
		f.loop(s)
	case kernel.SBlock:
		f.line("{")
		f.depth++
		f.stmts(s.Body)
		f.depth--
		f.line("}")
	case kernel.SBarrier, kernel.SPrefetch, kernel.SStage:
		// nothing: this target runs a kernel on one thread, from memory as it is
	default:
		f.fail("statement %d", s.Op)
	}
}

func (f *fn) loop(s *kernel.Stmt) {
	if s.Loop == kernel.Parallel {
		f.line("// parallel: callers split this loop by slicing")
	}
	lo, hi := f.bare(s.Lo), f.bare(s.Hi)
	// the loop variable's scope is the loop's: open it before naming
	f.scope = append(f.scope, nil)
	defer f.closeScope()
	i := f.declVar(s.Var)
	init := i + " := " + lo
	if !stable(s.Hi) { // Go re-evaluates the condition; the IR evaluates bounds once
		n := f.ident(i + "End")
		f.scope = append(f.scope, nameOnly(n))
		init, hi = fmt.Sprintf("%s, %s := %s, %s", i, n, lo, hi), n
	}
	post := i + "++"
	if s.Step != 1 {
		post = fmt.Sprintf("%s += %d", i, s.Step)
	}
	f.line("for %s; %s < %s; %s {", init, i, hi, post)
	f.depth++
	f.stmts(s.Body)
	f.depth--
	f.line("}")
}

// stable reports an expression whose value cannot change while a loop runs.
func stable(e kernel.Expr) bool {
	switch e.Op {
	case kernel.OpConst, kernel.OpLen:
		return true
	case kernel.OpVar:
		return e.Var.Role != kernel.RoleAcc
	case kernel.OpLoad:
		return false
	}
	for _, a := range e.Args {
		if !stable(a) {
			return false
		}
	}
	return true
}
