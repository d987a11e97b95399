package capabilities

import (
	"fmt"
	"strings"
)

// Markdown renders t as docs/capabilities.md (and the text of `jitllm
// capabilities`). header goes first, verbatim (the generated-file notice).
func Markdown(t Table, header string) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	b.WriteString(header)
	p("# Capabilities\n\n")
	p("What this build of jitllm can run, as `gen/capabilities` found it in the code (`go generate ./...`).\n")
	p("The same table is printed by `jitllm capabilities [-json]` and served as JSON by `GET /v1/capabilities`.\n\n")

	p("## Model families\n\n")
	p("| family | architectures | models | ops | backends |\n|---|---|---|---|---|\n")
	for _, f := range t.Families {
		p("| %s | %s | %s | %s | %s |\n", f.Name, code(f.Architectures), f.Models, strings.Join(f.Ops, ", "), orNone(f.Backends))
	}
	p("\n")
	for _, f := range t.Families {
		p("%s reads: %s.\n\n", f.Name, code(f.Hyper))
	}

	p("## Backends\n\n")
	p("| backend | device | package | ops | variants |\n|---|---|---|---|---|\n")
	for _, be := range t.Backends {
		var vs []string
		for _, v := range be.Variants {
			s := v.GOARCH + ": " + v.Kind
			if len(v.Features) > 0 {
				s += " (" + strings.Join(v.Features, "+") + ")"
			}
			if len(v.ISAs) > 0 {
				s += " (" + strings.Join(v.ISAs, ", ") + ")"
			}
			vs = append(vs, s)
		}
		p("| %s | %s | `%s` | %s | %s |\n", be.Name, be.Device, be.Package, strings.Join(be.Ops, ", "), strings.Join(vs, "; "))
	}
	p("\n")

	p("## Quant types\n\n")
	p("`decode`: weights of the type can be read (embeddings, norms); `matmul`: a matrix multiply over weights of the type has a kernel.\n\n")
	p("| type |")
	sep := "|---|"
	for _, be := range t.Backends {
		p(" %s decode | %s matmul |", be.Name, be.Name)
		sep += "---|---|"
	}
	p("\n%s\n", sep)
	if len(t.Backends) > 0 {
		for i, q := range t.Backends[0].Quant {
			p("| %s |", q.Type)
			for _, be := range t.Backends {
				d, m := false, false
				if i < len(be.Quant) && be.Quant[i].Type == q.Type {
					d, m = be.Quant[i].Decode, be.Quant[i].MatMul
				} else if qq, ok := be.QuantType(q.Type); ok {
					d, m = qq.Decode, qq.MatMul
				}
				p(" %s | %s |", mark(d), mark(m))
			}
			p("\n")
		}
	}
	p("\n")

	p("## API endpoints\n\n")
	if t.EndpointsNote != "" {
		p("%s\n\n", t.EndpointsNote)
	}
	if len(t.Endpoints) > 0 {
		p("| method | path | accepts | refuses |\n|---|---|---|---|\n")
		for _, e := range t.Endpoints {
			p("| %s | `%s` | %s | %s |\n", e.Method, e.Path, code(e.Accepts), code(e.Refuses))
		}
		p("\n")
	}
	p("## Ops of the DSL\n\n%s\n", code(t.Ops))
	return b.String()
}

func code(ss []string) string {
	if len(ss) == 0 {
		return "—"
	}
	return "`" + strings.Join(ss, "`, `") + "`"
}

func orNone(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return strings.Join(ss, ", ")
}

func mark(b bool) string {
	if b {
		return "yes"
	}
	return "—"
}
