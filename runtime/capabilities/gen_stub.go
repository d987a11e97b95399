//go:build jitllm_gen

package capabilities

// generated is empty while gen/capabilities runs (tag jitllm_gen), so a stale
// or broken zz_capabilities.go never stops its own regeneration.
var generated Table
