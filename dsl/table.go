package dsl

import (
	"fmt"
	"strings"
)

// Table is what go generate records of one family (see graphs/zz_tables.go).
type Table struct {
	Family        string
	Architectures []string
	Models        string
	Ops           []string
	Weights       []WeightRow
	Hyper         []HyperKey
}

// WeightRow is one weight pattern of a family: %d stands for the block.
type WeightRow struct {
	GGUF, HF  string
	Class     Class
	Op        string // the op that consumes it
	Transform Transform
	Optional  bool
}

// Match finds the row whose GGUF pattern names tensor, and the block index
// (-1 outside blocks).
func (t *Table) Match(tensor string) (*WeightRow, int, bool) {
	for i := range t.Weights {
		w := &t.Weights[i]
		if !strings.Contains(w.GGUF, "%d") {
			if w.GGUF == tensor {
				return w, -1, true
			}
			continue
		}
		var blk int
		pre, post, _ := strings.Cut(w.GGUF, "%d")
		if !strings.HasPrefix(tensor, pre) || !strings.HasSuffix(tensor, post) {
			continue
		}
		mid := tensor[len(pre) : len(tensor)-len(post)]
		if _, err := fmt.Sscanf(mid, "%d", &blk); err == nil && fmt.Sprint(blk) == mid {
			return w, blk, true
		}
	}
	return nil, 0, false
}

// HFName maps a GGUF tensor name to its Hugging Face name.
func (t *Table) HFName(tensor string) (string, bool) {
	w, blk, ok := t.Match(tensor)
	if !ok || w.HF == "" {
		return "", false
	}
	if blk < 0 {
		return w.HF, true
	}
	return fmt.Sprintf(w.HF, blk), true
}
