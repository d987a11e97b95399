// Package nofma reports floating-point products that the Go compiler may fuse
// into a multiply-add.
//
// The Go spec lets an implementation fuse x*y + z into one FMA (one rounding
// instead of two) unless the product is explicitly converted, float32(x*y)+z.
// gc does so on arm64, ppc64, s390x, riscv64 and on amd64 with GOAMD64=v3, and
// it matches on SSA values, so a product held in a local variable fuses with a
// later addition too. jitllm's CPU results must round as llama.cpp's do, so
// every such product in the exact packages is wrapped in a conversion.
//
// Reported (float32/float64, including named float types):
//
//	a*b + c, c + a*b, a*b - c, c - a*b, c + -(a*b)
//	x += a*b, x -= a*b
//	t := a*b (or t = a*b, var t = a*b) when the local t is an operand of + or -
//	return a*b (the call may be inlined into a + or -)
//	f(a*b) when f's parameter is an operand of + or - (directly or handed on
//	to such a function; a fact carries this across packages, math.Exp too)
//
// Not seen: products reaching an addition through a copy of a parameter,
// dynamic calls, or SSA-able composite locals. The fix wraps the product:
// T(a*b). A `//nofma:ok` comment on the product's line accepts a fusion.
package nofma

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/token"
	"go/types"
	"path/filepath"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"
)

// Analyzer is the nofma check.
var Analyzer = &analysis.Analyzer{
	Name:      "nofma",
	Doc:       "report float products the compiler may fuse into an FMA (wrap them: T(a*b))",
	URL:       "https://github.com/jitllm/jitllm/tree/main/gen/nofma",
	Run:       run,
	FactTypes: []analysis.Fact{new(addsParams)},
}

// addsParams marks a function whose float parameters (bit i: parameter i)
// are operands of + or -: a product passed to one fuses once the call is
// inlined (nearestInt(iscale*x) adds 12582912 to its argument).
type addsParams struct{ Mask uint64 }

func (*addsParams) AFact() {}

func (f *addsParams) String() string { return fmt.Sprintf("addsParams(%#x)", f.Mask) }

const okDirective = "//nofma:ok"

func run(pass *analysis.Pass) (any, error) {
	reported := map[*ast.BinaryExpr]bool{}
	okLines := allowedLines(pass)

	report := func(mul *ast.BinaryExpr, why string) {
		if reported[mul] {
			return
		}
		reported[mul] = true
		pos := pass.Fset.Position(mul.Pos())
		if okLines[lineKey{pos.Filename, pos.Line}] {
			return
		}
		tname := types.TypeString(pass.TypesInfo.TypeOf(mul), types.RelativeTo(pass.Pkg))
		var buf bytes.Buffer
		if err := format.Node(&buf, pass.Fset, mul); err != nil {
			buf.Reset()
			buf.WriteString("a*b")
		}
		pass.Report(analysis.Diagnostic{
			Pos:     mul.Pos(),
			End:     mul.End(),
			Message: fmt.Sprintf("%s product %s may be fused into an FMA (%s); wrap it: %s(...)", tname, buf.String(), why, tname),
			SuggestedFixes: []analysis.SuggestedFix{{
				Message: "wrap the product in " + tname + "(...)",
				TextEdits: []analysis.TextEdit{
					{Pos: mul.Pos(), End: mul.Pos(), NewText: []byte(tname + "(")},
					{Pos: mul.End(), End: mul.End(), NewText: []byte(")")},
				},
			}},
		})
	}

	adders := paramAdders(pass)
	// Per top-level declaration (function literals inside included, since a
	// closure may add a captured product): products assigned to locals, so
	// that a later c + t, which gc fuses just the same, is traced back.
	for _, f := range pass.Files {
		for _, d := range f.Decls {
			checkDecl(pass, d, adders, report)
		}
	}
	return nil, nil
}

func checkDecl(pass *analysis.Pass, body ast.Node, adders func(*types.Func) uint64, report func(*ast.BinaryExpr, string)) {
	held := map[*types.Var][]*ast.BinaryExpr{} // local -> products assigned to it
	record := func(lhs ast.Expr, rhs ast.Expr) {
		id, ok := ast.Unparen(lhs).(*ast.Ident)
		if !ok {
			return
		}
		v, ok := pass.TypesInfo.ObjectOf(id).(*types.Var)
		if !ok || v.IsField() || v.Parent() == nil || v.Parent() == v.Pkg().Scope() {
			return // fields and package variables live in memory: no SSA value to fuse
		}
		if mul := product(pass, rhs); mul != nil {
			held[v] = append(held[v], mul)
		}
	}
	ast.Inspect(body, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.AssignStmt:
			if s.Tok == token.DEFINE || s.Tok == token.ASSIGN {
				if len(s.Lhs) == len(s.Rhs) {
					for i := range s.Lhs {
						record(s.Lhs[i], s.Rhs[i])
					}
				}
			}
		case *ast.ValueSpec:
			if len(s.Names) == len(s.Values) {
				for i := range s.Names {
					record(s.Names[i], s.Values[i])
				}
			}
		}
		return true
	})

	operand := func(e ast.Expr, why string) {
		if mul := product(pass, e); mul != nil {
			report(mul, why)
			return
		}
		if id, ok := stripNeg(e).(*ast.Ident); ok {
			if v, ok := pass.TypesInfo.ObjectOf(id).(*types.Var); ok {
				for _, mul := range held[v] {
					at := pass.Fset.Position(id.Pos())
					report(mul, fmt.Sprintf("held in %s, which is added at %s:%d", id.Name, filepath.Base(at.Filename), at.Line))
				}
			}
		}
	}

	ast.Inspect(body, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.BinaryExpr:
			if (s.Op == token.ADD || s.Op == token.SUB) && isFloat(pass.TypesInfo.TypeOf(s)) && !isConst(pass, s) {
				operand(s.X, "operand of "+s.Op.String())
				operand(s.Y, "operand of "+s.Op.String())
			}
		case *ast.AssignStmt:
			if (s.Tok == token.ADD_ASSIGN || s.Tok == token.SUB_ASSIGN) && len(s.Rhs) == 1 && isFloat(pass.TypesInfo.TypeOf(s.Lhs[0])) {
				operand(s.Lhs[0], "operand of "+s.Tok.String())
				operand(s.Rhs[0], "operand of "+s.Tok.String())
			}
		case *ast.CallExpr:
			fn, _ := typeutil.Callee(pass.TypesInfo, s).(*types.Func)
			if fn == nil {
				break
			}
			mask := adders(fn)
			for i, a := range s.Args {
				if i < 64 && mask&(1<<i) != 0 {
					operand(a, "passed to "+fn.Name()+", which adds that parameter")
				}
			}
		case *ast.ReturnStmt:
			for _, r := range s.Results {
				if mul := product(pass, r); mul != nil {
					report(mul, "returned; an inlined call may add it")
				}
			}
		}
		return true
	})
}

// paramAdders computes the addsParams facts of this package's functions
// (to a fixed point, so that a parameter handed on to an adder counts) and
// returns a lookup that also reads the facts of imported functions.
func paramAdders(pass *analysis.Pass) func(*types.Func) uint64 {
	local := map[*types.Func]uint64{}
	lookup := func(fn *types.Func) uint64 {
		if m, ok := local[fn]; ok {
			return m
		}
		var f addsParams
		if fn.Pkg() != pass.Pkg && pass.ImportObjectFact(fn, &f) {
			return f.Mask
		}
		return 0
	}
	type decl struct {
		fn     *types.Func
		params map[*types.Var]int
		body   *ast.BlockStmt
	}
	var decls []decl
	for _, f := range pass.Files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			fn, _ := pass.TypesInfo.Defs[fd.Name].(*types.Func)
			if fn == nil {
				continue
			}
			params := map[*types.Var]int{}
			sig := fn.Type().(*types.Signature)
			for i := 0; i < sig.Params().Len() && i < 64; i++ {
				if v := sig.Params().At(i); isFloat(v.Type()) {
					params[v] = i
				}
			}
			if len(params) > 0 {
				decls = append(decls, decl{fn, params, fd.Body})
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for _, d := range decls {
			mask := local[d.fn]
			mark := func(e ast.Expr) {
				if id, ok := stripNeg(e).(*ast.Ident); ok {
					if v, ok := pass.TypesInfo.Uses[id].(*types.Var); ok {
						if i, ok := d.params[v]; ok {
							mask |= 1 << i
						}
					}
				}
			}
			ast.Inspect(d.body, func(n ast.Node) bool {
				switch s := n.(type) {
				case *ast.BinaryExpr:
					if (s.Op == token.ADD || s.Op == token.SUB) && isFloat(pass.TypesInfo.TypeOf(s)) {
						mark(s.X)
						mark(s.Y)
					}
				case *ast.AssignStmt:
					if (s.Tok == token.ADD_ASSIGN || s.Tok == token.SUB_ASSIGN) && len(s.Rhs) == 1 {
						mark(s.Lhs[0])
						mark(s.Rhs[0])
					}
				case *ast.CallExpr:
					if fn, _ := typeutil.Callee(pass.TypesInfo, s).(*types.Func); fn != nil {
						m := lookup(fn)
						for i, a := range s.Args {
							if i < 64 && m&(1<<i) != 0 {
								mark(a)
							}
						}
					}
				}
				return true
			})
			if mask != local[d.fn] {
				local[d.fn] = mask
				changed = true
			}
		}
	}
	for fn, m := range local {
		if m != 0 {
			pass.ExportObjectFact(fn, &addsParams{m})
		}
	}
	return lookup
}

// product returns the float multiplication e is (through parentheses and
// unary minus, which arm64 folds into FNMUL/FMSUB), or nil.
func product(pass *analysis.Pass, e ast.Expr) *ast.BinaryExpr {
	b, ok := stripNeg(e).(*ast.BinaryExpr)
	if !ok || b.Op != token.MUL || !isFloat(pass.TypesInfo.TypeOf(b)) || isConst(pass, b) {
		return nil
	}
	return b
}

func stripNeg(e ast.Expr) ast.Expr {
	for {
		e = ast.Unparen(e)
		u, ok := e.(*ast.UnaryExpr)
		if !ok || (u.Op != token.SUB && u.Op != token.ADD) {
			return e
		}
		e = u.X
	}
}

func isFloat(t types.Type) bool {
	if t == nil {
		return false
	}
	b, ok := t.Underlying().(*types.Basic)
	return ok && b.Info()&types.IsFloat != 0 && b.Info()&types.IsUntyped == 0
}

// isConst: constant expressions are folded exactly at compile time.
func isConst(pass *analysis.Pass, e ast.Expr) bool {
	tv, ok := pass.TypesInfo.Types[e]
	return ok && tv.Value != nil
}

type lineKey struct {
	file string
	line int
}

func allowedLines(pass *analysis.Pass) map[lineKey]bool {
	ok := map[lineKey]bool{}
	for _, f := range pass.Files {
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if strings.HasPrefix(c.Text, okDirective) {
					p := pass.Fset.Position(c.Pos())
					ok[lineKey{p.Filename, p.Line}] = true
				}
			}
		}
	}
	return ok
}
