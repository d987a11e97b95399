package kernel

import (
	"fmt"
	"sort"
	"strings"
)

// Specialize is k with some of its scalar parameters fixed: each named in
// vals (a Go int or float32, as kernel.Run takes it) becomes a constant
// throughout the body, constants fold, and the parameter leaves the
// signature. The result is named k.Name plus a suffix naming the values,
// so several specializations share a module. A target then sees constant
// trip counts and divisors: a 64-value dot it can unroll whole, a
// division by a head count that is a shift.
func Specialize(k *Kernel, vals map[string]any) (*Kernel, error) {
	out := *k
	out.Params = nil
	body := k.Body
	result := k.Result
	used := map[string]bool{}
	var names []string
	for _, p := range k.Params {
		if p.Var == nil {
			out.Params = append(out.Params, p)
			continue
		}
		v, ok := vals[p.Var.Name]
		if !ok {
			out.Params = append(out.Params, p)
			continue
		}
		c := Const(p.Var.Kind, v)
		if err := firstErr(c); err != nil {
			return nil, fmt.Errorf("kernel %s: specializing %s: %v", k.Name, p.Var.Name, err)
		}
		body = substStmts(body, p.Var, c)
		result = subst(result, p.Var, c)
		used[p.Var.Name] = true
		names = append(names, fmt.Sprintf("%s%v", p.Var.Name, v))
	}
	for name := range vals {
		if !used[name] {
			return nil, fmt.Errorf("kernel %s: no scalar parameter %s to specialize", k.Name, name)
		}
	}
	sort.Strings(names)
	suffix := strings.NewReplacer(".", "p", "-", "m", "+", "").Replace(strings.Join(names, "_"))
	out.Name = k.Name + "_" + suffix
	out.Body, out.Result = body, result
	return &out, nil
}
