package kernel_test

import (
	"slices"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
)

// A block epilogue gives the producer's and the epilogue's results, its
// groups in order (Run) or in any order (RunGroups), and leaves each block's
// count grown by the block; an epilogue that reads another block's outputs
// differs when the groups run out of order.
func TestBlockEpilogue(t *testing.T) {
	const rows, n = 32 * 7, 40
	w := make([]float32, rows*n)
	for i := range w {
		w[i] = float32((i*7919)%101) - 50
	}
	y := make([]float32, rows)
	want := make([]float32, rows/32)
	if err := k.Run(rowSums(), w, y, n); err != nil {
		t.Fatal(err)
	}
	if err := k.Run(blockMax(), y, want); err != nil {
		t.Fatal(err)
	}
	be, err := k.BlockEpilogue("rowsMax", 32, 1, rowSums(), blockMax())
	if err != nil {
		t.Fatal(err)
	}
	cnt := make([]uint32, rows/32)
	for run := range 4 {
		gy, m := make([]float32, rows), make([]float32, rows/32)
		if run == 0 {
			err = k.Run(be, w, gy, n, gy, m, cnt)
		} else {
			err = k.RunGroups(be, uint64(run), w, gy, n, gy, m, cnt)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(m, want) || !slices.Equal(gy, y) {
			t.Errorf("run %d: %v, want %v", run, m, want)
		}
		for b, c := range cnt {
			if c != uint32(32*(run+1)) {
				t.Fatalf("run %d: block %d's count %d, want %d", run, b, c, 32*(run+1))
			}
		}
	}
	bad, err := k.BlockEpilogue("rowsNextMax", 32, 1, rowSums(), blockMaxShifted(1))
	if err != nil {
		t.Fatal(err)
	}
	gy, m := make([]float32, rows), make([]float32, rows/32)
	if err := k.Run(bad, w, gy, n, gy, m, make([]uint32, rows/32)); err != nil {
		t.Fatal(err)
	}
	inOrder := slices.Clone(m)
	caught := false
	for seed := range uint64(4) {
		gy, m := make([]float32, rows), make([]float32, rows/32)
		if err := k.RunGroups(bad, seed+1, w, gy, n, gy, m, make([]uint32, rows/32)); err != nil {
			t.Fatal(err)
		}
		caught = caught || !slices.Equal(m, inOrder)
	}
	if !caught {
		t.Error("an epilogue reading the next block's outputs gave the same results in every order")
	}
	for _, c := range []struct{ block, rows int }{{32, 3}, {2, 4}, {32, 0}} {
		if _, err := k.BlockEpilogue("x", c.block, c.rows, rowSums(), blockMax()); err == nil {
			t.Errorf("blocks of %d over groups of %d rows: no error", c.block, c.rows)
		}
	}
	if err := k.RunGroups(rowSums(), 1, w, y, n); err == nil {
		t.Error("RunGroups of a plain kernel: no error")
	}
}
