package dsl

import (
	"fmt"

	"github.com/jitllm/jitllm/runtime/meta"
)

// traceHyper are the sizes a family is traced with at generate time: small,
// distinct and consistent, so shape errors surface then, not at load.
var traceHyper = map[string]int{
	"block_count":             2,
	"embedding_length":        256,
	"attention.head_count":    4,
	"attention.head_count_kv": 2,
	"feed_forward_length":     512,
	"context_length":          512,
	"vocab_size":              1000,
	"expert_count":            4,
	"expert_used_count":       2,
}

type traceEnv struct{ m *meta.Map }

func (e traceEnv) Meta() *meta.Map { return e.m }
func (e traceEnv) Has(string) bool { return true }

// Trace builds f's graph for its first architecture with synthetic sizes and
// every optional weight present: what go generate tabulates.
func Trace(f *Family) (*G, error) {
	arch := f.Architectures[0]
	var m meta.Map
	m.Set("general.architecture", meta.Str(arch))
	for k, v := range traceHyper {
		m.Set(arch+"."+k, meta.U32(uint32(v)))
	}
	g := NewG(arch, NewHyper(arch, &m))
	g.env = traceEnv{&m}
	f.Build(g)
	if err := g.Err(); err != nil {
		return nil, fmt.Errorf("tracing %s: %w", f.Name, err)
	}
	return g, nil
}
