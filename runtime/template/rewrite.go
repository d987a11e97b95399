package template

import (
	"fmt"
	"strings"
)

// The rewrites below fix, in the template source, constructs that
// github.com/ardanlabs/jinja v1.8.0 renders differently from Jinja2. Each is
// a rule of the language, not a case of some template:
//
//   - x.0 (integer attribute access, Jinja2's getattr-then-getitem) becomes
//     x[0].
//   - value | tojson(indent=N, ...) becomes __jl_tojson(value, indent=N,
//     ...): the library's indented form goes through encoding/json (sorted
//     keys, HTML escaping); ours keeps insertion order and Python's layout.
//   - {% for t in items if cond %} (a loop filter, which the library
//     ignores) collects the passing items first, so loop.index, loop.last
//     and friends count only those, as in Jinja2.
//   - x | string becomes x | __jl_string, Python's str() (the library's
//     filter cannot be overridden, builtins are looked up first).
//   - f(*x) and f(**x), which the library does not parse, become
//     __jl_call(f, spec, ...), which spreads the arguments in Go.
//
// Two more bound what a template can do: each macro body opens with
// {% set __jl_depth = __jl_enter() %} and closes with __jl_leave(), which
// count the macros in progress and fail the render past maxMacroDepth (the
// library recurses in Go without a limit, and a macro that calls itself
// forever would overflow the stack: a fatal error, not a panic); each loop
// body opens with __jl_step(), which fails the render past maxIterations
// (nested loops over large ranges would run for hours). The guards are
// block tags placed against the macro's and loop's own tags with their
// whitespace markers, so trim_blocks and lstrip_blocks strip what they
// stripped before.

type tokKind int

const (
	tName tokKind = iota
	tNum
	tStr
	tOp
)

type token struct {
	kind       tokKind
	start, end int
	text       string
}

func lex(s string) []token {
	var out []token
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i + 1
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			out = append(out, token{tName, i, j, s[i:j]})
			i = j
		case c >= '0' && c <= '9':
			j := i + 1
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			afterDot := len(out) > 0 && out[len(out)-1].text == "."
			if !afterDot && j+1 < len(s) && s[j] == '.' && s[j+1] >= '0' && s[j+1] <= '9' {
				j++
				for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == 'e' || s[j] == 'E') {
					j++
				}
			}
			out = append(out, token{tNum, i, j, s[i:j]})
			i = j
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(s))
			out = append(out, token{tStr, i, j, s[i:j]})
			i = j
		default:
			j := i + 1
			if j < len(s) {
				switch s[i : j+1] {
				case "**", "//", "==", "!=", "<=", ">=":
					j++
				}
			}
			out = append(out, token{tOp, i, j, s[i:j]})
			i = j
		}
	}
	return out
}

var keywords = map[string]bool{"and": true, "or": true, "not": true, "in": true, "is": true, "if": true, "else": true,
	"for": true, "set": true, "elif": true, "with": true, "recursive": true}

// match returns the index of the bracket closing toks[i].
func match(toks []token, i int) int {
	depth := 0
	for j := i; j < len(toks); j++ {
		switch toks[j].text {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

// matchBack returns the index of the bracket opening toks[i].
func matchBack(toks []token, i int) int {
	depth := 0
	for j := i; j >= 0; j-- {
		switch toks[j].text {
		case ")", "]", "}":
			depth++
		case "(", "[", "{":
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

// operandStart finds the first token of the filter operand ending at
// toks[i]: a primary with its postfix accessors and earlier filters.
func operandStart(toks []token, i int) int {
	j := i
	for j >= 0 {
		t := toks[j]
		switch {
		case t.text == ")" || t.text == "]" || t.text == "}":
			k := matchBack(toks, j)
			if k < 0 {
				return -1
			}
			j, t = k, toks[k]
		case t.kind == tName && keywords[t.text]:
			return -1
		case t.kind == tName || t.kind == tNum || t.kind == tStr:
		default:
			return -1
		}
		// toks[j] starts a primary or a postfix; see what precedes it.
		if j == 0 {
			return 0
		}
		p := toks[j-1]
		switch {
		case p.text == "." || p.text == "|":
			j -= 2
		case (t.text == "(" || t.text == "[") && (p.kind == tName && !keywords[p.text] || p.kind == tStr || p.text == ")" || p.text == "]"):
			j--
		default:
			return j
		}
	}
	return -1
}

// rewriteExpr applies the expression rewrites until none is left.
func rewriteExpr(s string) string {
	for n := 0; n < 1000; n++ {
		toks := lex(s)
		done := true
		for i := 1; i+1 < len(toks); i++ {
			t := toks[i]
			// x.0 -> x[0]
			if t.text == "." && toks[i+1].kind == tNum && !strings.ContainsAny(toks[i+1].text, ".eE") && t.start == toks[i-1].end &&
				(toks[i-1].kind == tName || toks[i-1].text == ")" || toks[i-1].text == "]") {
				s = s[:t.start] + "[" + toks[i+1].text + "]" + s[toks[i+1].end:]
				done = false
				break
			}
			// v | string -> v | __jl_string
			if t.text == "|" && toks[i+1].text == "string" && (i+2 == len(toks) || toks[i+2].text != "(") {
				s = s[:toks[i+1].start] + "__jl_string" + s[toks[i+1].end:]
				done = false
				break
			}
			// f(a, *x, k=v, **d) -> __jl_call(f, "p*k", a, x, d, k=v)
			if t.text == "(" && (toks[i-1].kind == tName && !keywords[toks[i-1].text] || toks[i-1].text == ")" || toks[i-1].text == "]") {
				if r, ok := rewriteStarCall(s, toks, i); ok {
					s = r
					done = false
					break
				}
			}
			// v | tojson(indent=...) -> __jl_tojson(v, indent=...)
			if t.text == "|" && toks[i+1].text == "tojson" && i+2 < len(toks) && toks[i+2].text == "(" {
				k := match(toks, i+2)
				if k < 0 {
					continue
				}
				hasIndent := false
				for j := i + 3; j+1 < k; j++ {
					if toks[j].text == "indent" && toks[j+1].text == "=" {
						hasIndent = true
					}
				}
				st := operandStart(toks, i-1)
				if !hasIndent || st < 0 {
					continue
				}
				s = s[:toks[st].start] + "__jl_tojson(" + s[toks[st].start:toks[i-1].end] + ", " + s[toks[i+3].start:toks[k].start] + ")" + s[toks[k].end:]
				done = false
				break
			}
		}
		if done {
			return s
		}
	}
	return s
}

// rewriteStarCall rewrites the call whose argument list opens at toks[open]
// if an argument is *x or **x; ok is false when none is or the callee is
// not a plain primary.
func rewriteStarCall(s string, toks []token, open int) (string, bool) {
	end := match(toks, open)
	if end < 0 {
		return "", false
	}
	type arg struct {
		a, b int // token range, star marker excluded
		kind byte
	}
	var args []arg
	star := false
	for a := open + 1; a < end; {
		b := a
		for b < end && toks[b].text != "," {
			if k := toks[b].text; k == "(" || k == "[" || k == "{" {
				if b = match(toks, b); b < 0 || b > end {
					return "", false
				}
			}
			b++
		}
		if b > a {
			x := arg{a, b, 'p'}
			switch {
			case toks[a].text == "*":
				x.a, x.kind, star = a+1, '*', true
			case toks[a].text == "**":
				x.a, x.kind, star = a+1, 'k', true
			case toks[a].kind == tName && a+1 < b && toks[a+1].text == "=":
				x.kind = '='
			}
			if x.a >= x.b {
				return "", false
			}
			args = append(args, x)
		}
		a = b + 1
	}
	if !star {
		return "", false
	}
	st := operandStart(toks, open-1)
	if st < 0 {
		return "", false
	}
	for j := st; j < open; j++ {
		if toks[j].text == "|" {
			return "", false // a filter's arguments, not a call
		}
	}
	var spec, pos, kw strings.Builder
	for _, x := range args {
		text := s[toks[x.a].start:toks[x.b-1].end]
		if x.kind == '=' {
			kw.WriteString(", " + text)
			continue
		}
		spec.WriteByte(x.kind)
		pos.WriteString(", " + text)
	}
	call := "__jl_call(" + s[toks[st].start:toks[open-1].end] + ", \"" + spec.String() + "\"" + pos.String() + kw.String() + ")"
	return s[:toks[st].start] + call + s[toks[end].end:], true
}

// tag is a {{ }} or {% %} in the source.
type tagSpan struct {
	start, end   int // the whole tag
	bStart, bEnd int // its body
	stmt         bool
	left, right  string // whitespace-control markers ("-", "+" or "")
}

// rewriteSource applies the rewrites to every tag of a template.
func rewriteSource(src string) string {
	var b strings.Builder
	i, last, loops := 0, 0, 0
	for {
		k := strings.Index(src[i:], "{")
		if k < 0 || i+k+1 >= len(src) {
			break
		}
		k += i
		op := src[k+1]
		if op == '#' {
			e := strings.Index(src[k+2:], "#}")
			if e < 0 {
				break
			}
			i = k + 2 + e + 2
			continue
		}
		if op != '{' && op != '%' {
			i = k + 1
			continue
		}
		closer := "}}"
		if op == '%' {
			closer = "%}"
		}
		// Find the closer outside string literals.
		j, q := k+2, byte(0)
		for ; j+1 < len(src); j++ {
			c := src[j]
			if q != 0 {
				if c == '\\' {
					j++
				} else if c == q {
					q = 0
				}
				continue
			}
			if c == '"' || c == '\'' {
				q = c
				continue
			}
			if src[j:j+2] == closer {
				break
			}
		}
		if j+1 >= len(src) {
			break
		}
		t := tagSpan{start: k, end: j + 2, bStart: k + 2, bEnd: j, stmt: op == '%'}
		if t.bStart < t.bEnd && (src[t.bStart] == '-' || src[t.bStart] == '+') {
			t.left = src[t.bStart : t.bStart+1]
			t.bStart++
		}
		if t.bEnd > t.bStart && src[t.bEnd-1] == '-' {
			t.right = "-"
			t.bEnd--
		}
		body := src[t.bStart:t.bEnd]
		if t.stmt && strings.TrimSpace(body) == "raw" {
			e := strings.Index(src[t.end:], "endraw")
			if e < 0 {
				break
			}
			i = t.end + e
			continue
		}
		out := ""
		if t.stmt {
			out = rewriteFor(body, t, &loops)
			if out == "" {
				out = guardTag(src, body, t)
			}
		}
		if out == "" {
			nb := rewriteExpr(body)
			if nb != body {
				out = src[t.start:t.bStart] + nb + src[t.bEnd:t.end]
			}
		}
		if out != "" {
			b.WriteString(src[last:t.start])
			b.WriteString(out)
			last = t.end
		}
		i = t.end
	}
	if last == 0 {
		return src
	}
	b.WriteString(src[last:])
	return b.String()
}

// rewriteFor turns a filtered for loop into a collecting loop and a loop
// over what it collected; "" when body is not one.
func rewriteFor(body string, t tagSpan, loops *int) string {
	toks := lex(body)
	if len(toks) < 5 || toks[0].text != "for" {
		return ""
	}
	in, cond := -1, -1
	for i := 1; i < len(toks); i++ {
		switch toks[i].text {
		case "(", "[", "{":
			if k := match(toks, i); k > 0 {
				i = k
			}
			continue
		case "recursive":
			return ""
		}
		if toks[i].kind != tName {
			continue
		}
		if toks[i].text == "in" && in < 0 {
			in = i
		} else if toks[i].text == "if" && in > 0 && cond < 0 {
			cond = i
		}
	}
	if in < 0 || cond < 0 {
		return ""
	}
	targets := strings.TrimSpace(body[toks[0].end:toks[in].start])
	iter := rewriteExpr(strings.TrimSpace(body[toks[in].end:toks[cond].start]))
	c := rewriteExpr(strings.TrimSpace(body[toks[cond].end:]))
	item := targets
	if strings.Contains(targets, ",") {
		item = "[" + targets + "]"
	}
	*loops++
	name := fmt.Sprintf("__jl_loop%d", *loops)
	r := t.right // inner tags repeat the right marker: trimming is idempotent
	tag := func(l, body, r string) string { return "{%" + l + " " + body + " " + r + "%}" }
	return tag(t.left, "set "+name+" = []", r) +
		tag("", "for "+targets+" in "+iter, r) + tick(r) +
		tag("", "if "+c, r) +
		tag("", "set _ = "+name+".append("+item+")", r) +
		tag("", "endif", r) + tag("", "endfor", r) +
		tag("", "for "+targets+" in "+name, t.right) + tick(t.right)
}

// tick is the guard that opens every loop body: it counts the render's
// iterations (maxIterations).
func tick(right string) string { return "{% set __jl_tick = __jl_step() " + right + "%}" }

// guardTag is a macro or endmacro tag t (body its text) with the depth
// guard beside it, or a for tag with its tick; "" for any other tag.
func guardTag(src, body string, t tagSpan) string {
	toks := lex(body)
	if len(toks) == 0 || toks[0].kind != tName {
		return ""
	}
	tag := src[t.start:t.end]
	switch toks[0].text {
	case "macro":
		return tag + "{% set __jl_depth = __jl_enter() " + t.right + "%}"
	case "endmacro":
		return "{%" + t.left + " set __jl_depth = __jl_leave() %}" + tag
	case "for":
		return tag + tick(t.right)
	}
	return ""
}
