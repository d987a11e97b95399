package dsl

import (
	"fmt"

	"github.com/jitllm/jitllm/runtime/meta"
)

// Hyper reads a graph's hyperparameters from model metadata under the
// architecture's prefix ("llama.block_count") and records which it read.
type Hyper struct {
	arch string
	m    *meta.Map
	Used []HyperKey
	err  error
}

// HyperKey is one hyperparameter a graph reads. Optional keys have a
// default in the family's code (often derived from other keys).
type HyperKey struct {
	Key      string // full metadata key
	Required bool
}

// NewHyper reads keys of arch from m.
func NewHyper(arch string, m *meta.Map) *Hyper { return &Hyper{arch: arch, m: m} }

// Err is the first missing or malformed hyperparameter.
func (h *Hyper) Err() error { return h.err }

func (h *Hyper) key(k string) string {
	if len(k) > 0 && k[0] == '.' { // absolute key, e.g. ".tokenizer.ggml.tokens"
		return k[1:]
	}
	return h.arch + "." + k
}

func (h *Hyper) record(k string, req bool) {
	for _, u := range h.Used {
		if u.Key == k {
			return
		}
	}
	h.Used = append(h.Used, HyperKey{k, req})
}

func (h *Hyper) fail(format string, args ...any) {
	if h.err == nil {
		h.err = fmt.Errorf(format, args...)
	}
}

// Int reads a required positive integer.
func (h *Hyper) Int(k string) int {
	full := h.key(k)
	h.record(full, true)
	v, ok := h.m.Get(full)
	if !ok {
		h.fail("model metadata lacks %s", full)
		return 1
	}
	return h.toInt(full, v)
}

// IntOr reads an optional integer.
func (h *Hyper) IntOr(k string, def int) int {
	full := h.key(k)
	h.record(full, false)
	v, ok := h.m.Get(full)
	if !ok {
		return def
	}
	return h.toInt(full, v)
}

func (h *Hyper) toInt(full string, v meta.Value) int {
	if v.Kind() == meta.Array { // per-layer arrays: all entries must agree for now
		if v.Len() == 0 {
			h.fail("%s is an empty array", full)
			return 1
		}
		v = v.At(0)
	}
	x, ok := v.Int()
	if !ok || x <= 0 || x > 1<<31 {
		h.fail("%s must be a positive integer, is %s", full, v)
		return 1
	}
	return int(x)
}

// Float reads a required number.
func (h *Hyper) Float(k string) float32 {
	full := h.key(k)
	h.record(full, true)
	v, ok := h.m.Float(full)
	if !ok {
		h.fail("model metadata lacks number %s", full)
	}
	return float32(v)
}

// FloatOr reads an optional number.
func (h *Hyper) FloatOr(k string, def float32) float32 {
	full := h.key(k)
	h.record(full, false)
	v, ok := h.m.Float(full)
	if !ok {
		return def
	}
	return float32(v)
}

// VocabSize is {arch}.vocab_size or the tokenizer's token count.
func (h *Hyper) VocabSize() int {
	if _, ok := h.m.Get(h.key("vocab_size")); ok {
		return h.IntOr("vocab_size", 1)
	}
	h.record(h.key("vocab_size"), false)
	full := "tokenizer.ggml.tokens"
	h.record(full, true)
	v, ok := h.m.Get(full)
	if !ok || v.Len() == 0 {
		h.fail("model metadata lacks %s.vocab_size and tokenizer.ggml.tokens", h.arch)
		return 1
	}
	return v.Len()
}
