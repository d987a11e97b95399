package dsl_test

import (
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/runtime/meta"
)

type env struct {
	m       *meta.Map
	missing map[string]bool
}

func (e env) Meta() *meta.Map      { return e.m }
func (e env) Has(name string) bool { return !e.missing[name] }
func newEnv(arch string, kv map[string]uint32) env {
	var m meta.Map
	m.Set("general.architecture", meta.Str(arch))
	for k, v := range kv {
		m.Set(arch+"."+k, meta.U32(v))
	}
	return env{m: &m, missing: map[string]bool{}}
}

func init() {
	dsl.Register(dsl.Family{Name: "toy", Architectures: []string{"toy"}, Build: func(g *dsl.G) {
		n := g.Hyper.Int("embedding_length")
		v := g.Hyper.Int("vocab_size")
		e := g.W("token_embd.weight", "embed.weight", dsl.Shape(n, v))
		x := g.Embed(e, g.Tokens())
		b := g.Block(0)
		x = g.RMSNorm(x, b.W("attn_norm", "norm", dsl.Shape(n)), 1e-5)
		out := g.W("output.weight", "lm_head.weight", dsl.Shape(n, v), dsl.Optional)
		if out == nil {
			out = e
		}
		g.Output("logits", g.MatMul(out, x))
	}})
}

func TestBuildToy(t *testing.T) {
	e := newEnv("toy", map[string]uint32{"embedding_length": 16, "vocab_size": 10})
	g, err := dsl.Build(e)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Weights) != 3 || g.Layers != 1 {
		t.Fatalf("weights %d layers %d", len(g.Weights), g.Layers)
	}
	if w := g.Weights[1]; w.GGUF != "blk.0.attn_norm.weight" || w.HF != "model.layers.0.norm.weight" || w.Class != dsl.ClassRepeating {
		t.Fatalf("block weight %+v", w)
	}
	logits := g.Nodes[g.Outputs["logits"]]
	if logits.Op != dsl.OpMatMul || logits.Cols != 10 {
		t.Fatalf("logits node %+v", logits)
	}
	// Tied output: without output.weight the embedding is reused.
	e.missing["output.weight"] = true
	g, err = dsl.Build(e)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Weights) != 2 || g.Nodes[g.Outputs["logits"]].Weight != 0 {
		t.Fatalf("tied output not reused: %d weights", len(g.Weights))
	}
}

func TestBuildErrors(t *testing.T) {
	cases := map[string]struct {
		e    env
		want string
	}{
		"unknown arch":  {newEnv("nosuch", nil), `architecture "nosuch" has no graph`},
		"missing hyper": {newEnv("toy", map[string]uint32{"vocab_size": 10}), "toy.embedding_length"},
		"missing weight": {func() env {
			e := newEnv("toy", map[string]uint32{"embedding_length": 4, "vocab_size": 3})
			e.missing["blk.0.attn_norm.weight"] = true
			return e
		}(), "blk.0.attn_norm.weight is missing"},
		"zero size": {newEnv("toy", map[string]uint32{"embedding_length": 0, "vocab_size": 3}), "positive integer"},
	}
	for name, c := range cases {
		_, err := dsl.Build(c.e)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, c.want)
		}
	}
	var m meta.Map
	if _, err := dsl.Build(env{m: &m}); err == nil || !strings.Contains(err.Error(), "general.architecture") {
		t.Errorf("no architecture: %v", err)
	}
}

func TestShapeMismatchFailsAtTrace(t *testing.T) {
	f := &dsl.Family{Name: "bad", Architectures: []string{"bad"}, Build: func(g *dsl.G) {
		e := g.W("token_embd.weight", "", dsl.Shape(8, 4))
		x := g.Embed(e, g.Tokens())
		g.Output("logits", g.MatMul(g.W("output.weight", "", dsl.Shape(16, 4)), x))
	}}
	if _, err := dsl.Trace(f); err == nil || !strings.Contains(err.Error(), "16 wide, input is 8") {
		t.Fatalf("shape mismatch not caught at trace: %v", err)
	}
}

func TestTableMatch(t *testing.T) {
	tab := dsl.Table{Weights: []dsl.WeightRow{
		{GGUF: "token_embd.weight", HF: "model.embed_tokens.weight"},
		{GGUF: "blk.%d.attn_q.weight", HF: "model.layers.%d.self_attn.q_proj.weight"},
	}}
	if hf, ok := tab.HFName("blk.12.attn_q.weight"); !ok || hf != "model.layers.12.self_attn.q_proj.weight" {
		t.Fatalf("HFName: %q %v", hf, ok)
	}
	for _, bad := range []string{"blk.x.attn_q.weight", "blk.01.attn_q.weight", "blk.1.attn_k.weight", "output.weight"} {
		if _, _, ok := tab.Match(bad); ok {
			t.Errorf("%s matched", bad)
		}
	}
}

// A dead value's slot is reused; an output's never is.
func TestPlanBuffers(t *testing.T) {
	e := newEnv("toy", map[string]uint32{"embedding_length": 16, "vocab_size": 10})
	g, err := dsl.Build(e)
	if err != nil {
		t.Fatal(err)
	}
	p := g.PlanBuffers(4)
	if p.Slot[0] != -1 {
		t.Fatalf("tokens got slot %d", p.Slot[0])
	}
	out := g.Outputs["logits"]
	for i := range g.Nodes {
		if i != out && p.Slot[i] == p.Slot[out] && i > out {
			t.Fatalf("node %d reuses the output's slot", i)
		}
	}
	// embed -> rms_norm -> matmul: the norm's input dies at the norm, so the
	// matmul (10 wide) can take the embedding's (16 wide) slot.
	if len(p.Sizes) != 2 || p.Slot[3] != p.Slot[1] || p.Sizes[p.Slot[1]] != 4*16 {
		t.Fatalf("plan %+v", p)
	}
	// read late by the matmul, the embedding lives on: the matmul takes a
	// slot of its own
	l := g.PlanBuffersLate(4, map[int][]int{3: {1}})
	if len(l.Sizes) != 3 || l.Slot[3] == l.Slot[1] || l.Slot[3] == l.Slot[2] {
		t.Fatalf("late plan %+v", l)
	}
}

// A grouped norm records its width (none when the group is the row) and
// refuses groups that do not tile the row or a weight of another width.
func TestRMSNormGroups(t *testing.T) {
	build := func(width, wdim int) (*dsl.G, error) {
		f := &dsl.Family{Name: "grp", Architectures: []string{"grp"}, Build: func(g *dsl.G) {
			e := g.W("token_embd.weight", "", dsl.Shape(12, 4))
			x := g.RMSNormGroups(g.Embed(e, g.Tokens()), g.W("norm.weight", "", dsl.Shape(wdim)), 1e-6, width)
			g.Output("logits", g.MatMul(e, x))
		}}
		return dsl.Trace(f)
	}
	g, err := build(4, 4)
	if err != nil {
		t.Fatal(err)
	}
	if n := g.Nodes[2]; n.Op != dsl.OpRMSNorm || n.K != 4 || n.Group() != 4 || n.Cols != 12 {
		t.Errorf("grouped norm node %+v (group %d)", n, n.Group())
	}
	if g, err = build(12, 12); err != nil || g.Nodes[2].K != 0 || g.Nodes[2].Group() != 12 {
		t.Errorf("a group of the whole row: %v, K %d", err, g.Nodes[2].K)
	}
	if _, err := build(5, 5); err == nil || !strings.Contains(err.Error(), "do not tile") {
		t.Errorf("groups of 5 in 12: %v", err)
	}
	if _, err := build(4, 12); err == nil || !strings.Contains(err.Error(), "groups are 4") {
		t.Errorf("weight of the row's width: %v", err)
	}
}
