// Package tokenizertest builds tokenizer files for tests.
package tokenizertest

import (
	"math"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/jitllm/jitllm/runtime/meta"
)

// SentencePiece is the SentencePiece model (tokenizer.model's ModelProto)
// of a GGUF's "llama" tokenizer metadata: its tokens, scores and types as
// pieces, its unknown, bos, eos and padding ids as the trainer spec's and
// add_space_prefix as the normalizer's add_dummy_prefix — what
// convert_hf_to_gguf.py would read back into the same metadata.
func SentencePiece(m *meta.Map) []byte {
	toks, _ := m.Strings("tokenizer.ggml.tokens")
	scores, _ := m.Float32s("tokenizer.ggml.scores")
	types, _ := m.Int32s("tokenizer.ggml.token_type")
	var b []byte
	for i, s := range toks {
		var p []byte
		p = protowire.AppendTag(p, 1, protowire.BytesType)
		p = protowire.AppendString(p, s)
		if i < len(scores) {
			p = protowire.AppendTag(p, 2, protowire.Fixed32Type)
			p = protowire.AppendFixed32(p, math.Float32bits(scores[i]))
		}
		if i < len(types) && types[i] != 1 { // NORMAL is the default
			p = protowire.AppendTag(p, 3, protowire.VarintType)
			p = protowire.AppendVarint(p, uint64(types[i]))
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, p)
	}
	var spec []byte
	for i, key := range []string{"unknown", "bos", "eos", "padding"} {
		id := int64(-1)
		if v, ok := m.Uint("tokenizer.ggml." + key + "_token_id"); ok && v < 1<<31 {
			id = int64(v)
		}
		spec = protowire.AppendTag(spec, protowire.Number(40+i), protowire.VarintType)
		spec = protowire.AppendVarint(spec, uint64(id)) // int32: a negative is ten bytes
	}
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, spec)
	prefix := true
	if v, ok := m.Bool("tokenizer.ggml.add_space_prefix"); ok {
		prefix = v
	}
	var norm []byte
	norm = protowire.AppendTag(norm, 3, protowire.VarintType)
	norm = protowire.AppendVarint(norm, protowire.EncodeBool(prefix))
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	return protowire.AppendBytes(b, norm)
}
