package dsl

import (
	"fmt"
	"sort"

	"github.com/jitllm/jitllm/runtime/meta"
)

// Env is what a graph may look at while it is built: the model's metadata
// and which tensors its file holds.
type Env interface {
	Meta() *meta.Map
	Has(tensor string) bool
}

// Family is one model family: a Build function written once in this DSL,
// for every GGUF architecture name it serves.
type Family struct {
	Name          string
	Architectures []string
	Models        string // the models it covers, for people
	Build         func(g *G)
}

var families = map[string]*Family{}

// Register adds a family (from an init in graphs/).
func Register(f Family) {
	for _, a := range f.Architectures {
		if _, dup := families[a]; dup {
			panic("dsl: architecture " + a + " registered twice")
		}
		ff := f
		families[a] = &ff
	}
}

// Families lists the registered families, sorted by name, once each.
func Families() []*Family {
	seen := map[string]bool{}
	var out []*Family
	for _, f := range families {
		if !seen[f.Name] {
			seen[f.Name] = true
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Architectures lists every architecture name with a graph, sorted.
func Architectures() []string {
	out := make([]string, 0, len(families))
	for a := range families {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// Build builds the graph for the model env describes.
func Build(env Env) (*G, error) {
	arch, _ := env.Meta().String("general.architecture")
	if arch == "" {
		return nil, fmt.Errorf("model metadata has no general.architecture")
	}
	f, ok := families[arch]
	if !ok {
		return nil, fmt.Errorf("architecture %q has no graph in this build (have: %v)", arch, Architectures())
	}
	g := NewG(arch, NewHyper(arch, env.Meta()))
	g.env = env
	f.Build(g)
	if err := g.Err(); err != nil {
		return nil, fmt.Errorf("%s graph: %w", arch, err)
	}
	if _, ok := g.Outputs["logits"]; !ok {
		return nil, fmt.Errorf("%s graph declares no logits output", arch)
	}
	return g, nil
}
