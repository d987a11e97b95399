package dsl_test

import (
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl"
	_ "github.com/jitllm/jitllm/graphs"
)

func traceLlama(t *testing.T) *dsl.G {
	t.Helper()
	for _, f := range dsl.Families() {
		if f.Name == "llama" {
			g, err := dsl.Trace(f)
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
	}
	t.Fatal("no llama family registered")
	return nil
}

func TestStageCut(t *testing.T) {
	g := traceLlama(t)
	if g.Layers != 2 {
		t.Fatalf("traced llama has %d blocks", g.Layers)
	}
	starts, err := g.BlockStarts()
	if err != nil {
		t.Fatal(err)
	}
	a, err := g.Stage(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := g.Stage(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	// The first stage is the nodes before block 1; the second a rows node and the rest.
	if len(a.Nodes) != starts[1] || len(b.Nodes) != len(g.Nodes)-starts[1]+1 {
		t.Fatalf("stage sizes %d + %d of %d nodes (block 1 at %d)", len(a.Nodes), len(b.Nodes), len(g.Nodes), starts[1])
	}
	if a.StageInput() != -1 || b.StageInput() != 0 {
		t.Fatalf("stage inputs %d, %d", a.StageInput(), b.StageInput())
	}
	h, ok := a.Outputs[dsl.StageOutput]
	if !ok || len(a.Outputs) != 1 {
		t.Fatalf("first stage outputs %v", a.Outputs)
	}
	w := g.Nodes[g.Outputs["logits"]].Weight
	if b.Nodes[0].Cols != a.Nodes[h].Cols || b.Nodes[0].Cols != int(g.Weights[w].Dims[0]) {
		t.Fatalf("rows node is %d wide, hidden %d", b.Nodes[0].Cols, a.Nodes[h].Cols)
	}
	if _, ok := b.Outputs["logits"]; !ok {
		t.Fatalf("last stage outputs %v", b.Outputs)
	}
	// Each node keeps its op and weight; inputs point inside the stage.
	for i, n := range b.Nodes[1:] {
		o := g.Nodes[starts[1]+i]
		if n.Op != o.Op || n.Weight != o.Weight || n.Layer != o.Layer {
			t.Fatalf("node %d: %+v, was %+v", i+1, n, o)
		}
		for _, in := range n.In {
			if in < 0 || in > i {
				t.Fatalf("node %d reads %d", i+1, in)
			}
		}
	}
	// Block 0's weights stay with the first stage; the output head with the last.
	for _, wi := range a.WeightsUsed() {
		if l := g.Weights[wi].Layer; l > 0 {
			t.Errorf("first stage reads %s of block %d", g.Weights[wi].GGUF, l)
		}
	}
	for _, wi := range b.WeightsUsed() {
		if l := g.Weights[wi].Layer; l == 0 {
			t.Errorf("second stage reads %s of block 0", g.Weights[wi].GGUF)
		}
	}
	if full, _ := g.Stage(0, 2); full != g {
		t.Error("the whole range is not the graph itself")
	}
	for _, r := range [][2]int{{0, 0}, {1, 1}, {-1, 1}, {1, 3}} {
		if _, err := g.Stage(r[0], r[1]); err == nil || !strings.Contains(err.Error(), "outside") {
			t.Errorf("stage %v: %v", r, err)
		}
	}
}

func TestStageCutErrors(t *testing.T) {
	g := traceLlama(t)
	// A node of block 1 that also reads the token ids: two values cross.
	bad := *g
	bad.Nodes = append([]dsl.Node(nil), g.Nodes...)
	starts, _ := g.BlockStarts()
	n := bad.Nodes[starts[1]+1]
	n.In = append(append([]int(nil), n.In...), 0)
	bad.Nodes[starts[1]+1] = n
	if _, err := bad.Stage(1, 2); err == nil || !strings.Contains(err.Error(), "2 values cross") {
		t.Errorf("two crossing values: %v", err)
	}
	// Blocks out of order.
	bad.Nodes = append([]dsl.Node(nil), g.Nodes...)
	bad.Nodes[starts[0]+1].Layer = 1
	bad.Nodes[starts[1]].Layer = 0
	if _, err := bad.BlockStarts(); err == nil || !strings.Contains(err.Error(), "not in order") {
		t.Errorf("blocks out of order: %v", err)
	}
}
