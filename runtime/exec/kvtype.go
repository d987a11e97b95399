package exec

import (
	"fmt"

	"github.com/jitllm/jitllm/dsl"
)

// KV cache types (Options.KVType, KVLayout.Type).
const (
	KVF16  = "f16"  // each K and V value an f16, as llama.cpp's default cache
	KVQ8_0 = "q8_0" // int8 quants and an f16 scale a block of 32 values (llama.cpp's -ctk/-ctv q8_0)
)

// KVTypes names the cache types, for flags and errors.
const KVTypes = "f16 or q8_0"

// ParseKVType checks a cache type name; "" is f16.
func ParseKVType(s string) (string, error) {
	switch s {
	case "", KVF16:
		return KVF16, nil
	case KVQ8_0:
		return KVQ8_0, nil
	}
	return "", fmt.Errorf("KV cache type %q: want %s", s, KVTypes)
}

// kvRowBytes is the bytes one K (or V) row of dim values takes in a cache
// of type t: 2 a value in f16; in q8_0 a byte a value and 2 a block of 32.
func kvRowBytes(t string, dim int) int {
	if t == KVQ8_0 {
		return dim + dim/32*2
	}
	return 2 * dim
}

// CheckKVType refuses a cache type that is not one or that g's attention
// cannot keep: q8_0 blocks of 32 values must not straddle two heads.
func CheckKVType(g *dsl.G, t string) error {
	t, err := ParseKVType(t)
	if err != nil || t != KVQ8_0 {
		return err
	}
	for _, n := range g.Nodes {
		if n.Op == dsl.OpAttention && n.Attn.HeadDim%32 != 0 {
			return fmt.Errorf("KV cache type q8_0 needs a head dim that is a multiple of 32 (its blocks); this model's is %d: use f16", n.Attn.HeadDim)
		}
	}
	return nil
}

// newLayerKV allocates a layer's caches of type t for size values each.
func newLayerKV(t string, size, dim int) layerKV {
	if t == KVQ8_0 {
		return layerKV{kq: make([]byte, size), vq: make([]byte, size),
			ks: make([]uint16, size/32), vs: make([]uint16, size/32), dim: dim}
	}
	return layerKV{k: make([]uint16, size), v: make([]uint16, size), dim: dim}
}
