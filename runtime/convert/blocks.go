package convert

import (
	"fmt"
	"sort"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/graphs"
	"github.com/jitllm/jitllm/runtime/jlm"
	"github.com/jitllm/jitllm/runtime/meta"
)

// blockLayout reads the architecture's generated weight table
// (graphs.Tables, traced from its graph) to find where each transformer
// block's tensors landed in the .jlm, so the pager can read or move one block
// as one byte range. It returns the metadata to add and a warning for each
// tensor the graph does not read (the file may be for another revision of
// the family, or carry extras such as vision towers). No table: no keys.
func blockLayout(arch string, ts []jlm.TensorInfo) (*meta.Map, []string) {
	fam, tab, ok := tableFor(arch)
	if !ok {
		return nil, []string{fmt.Sprintf("architecture %q has no graph in this build: block ranges not recorded", arch)}
	}
	type span struct{ lo, hi int64 }
	blocks := map[int]*span{}
	var warn []string
	for _, t := range ts {
		_, blk, ok := tab.Match(t.Name)
		if !ok {
			warn = append(warn, fmt.Sprintf("tensor %s is not read by the %s graph", t.Name, fam))
			continue
		}
		if blk < 0 {
			continue
		}
		s := blocks[blk]
		if s == nil {
			s = &span{t.Offset, t.Offset + t.Size}
			blocks[blk] = s
		}
		s.lo, s.hi = min(s.lo, t.Offset), max(s.hi, t.Offset+t.Size)
	}
	n := 0
	for b := range blocks {
		n = max(n, b+1)
	}
	off, size := make([]uint64, n), make([]uint64, n)
	for b, s := range blocks {
		off[b], size[b] = uint64(s.lo), uint64(s.hi-s.lo)
	}
	md := &meta.Map{}
	md.Set("jlm.graph.family", meta.Str(fam))
	md.Set("jlm.block.offset", u64s(off))
	md.Set("jlm.block.size", u64s(size))
	return md, warn
}

func tableFor(arch string) (string, *dsl.Table, bool) {
	names := make([]string, 0, len(graphs.Tables))
	for n := range graphs.Tables {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t := graphs.Tables[n]
		for _, a := range t.Architectures {
			if a == arch {
				return n, &t, true
			}
		}
	}
	return "", nil, false
}

func u64s(v []uint64) meta.Value {
	a := make([]meta.Value, len(v))
	for i, x := range v {
		a[i] = meta.U64(x)
	}
	return meta.Arr(meta.Uint64, a)
}
