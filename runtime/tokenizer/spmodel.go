package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/jitllm/jitllm/runtime/meta"
)

// A SentencePiece model file (tokenizer.model of Llama 2, Mistral,
// TinyLlama checkpoints) is google/sentencepiece's ModelProto in protobuf
// wire format. The fields read here (sentencepiece_model.proto):
//
//	ModelProto      1 pieces (repeated SentencePiece), 2 trainer_spec, 3 normalizer_spec
//	SentencePiece   1 piece (string), 2 score (float), 3 type (enum, NORMAL 1 when absent)
//	TrainerSpec     40 unk_id (0), 41 bos_id (1), 42 eos_id (2), 43 pad_id (−1)
//	NormalizerSpec  3 add_dummy_prefix (true)
//
// The piece types' numbers (NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4,
// UNUSED 5, BYTE 6) are GGUF's token types.

// spMaxPieces bounds a model's vocabulary (the largest real ones are 256k).
const spMaxPieces = 1 << 22

// MetaFromSentencePiece converts a SentencePiece model, with the
// checkpoint's tokenizer_config.json (may be nil), into tokenizer.ggml.*
// metadata as convert_hf_to_gguf.py's _create_vocab_sentencepiece does:
// model "llama", pre "default", each piece with its score and type, the
// vocabulary padded to vocabSize with "[PAD<id>]" (score −10000, unused);
// added_tokens_decoder's tokens over their ids (control if special, else
// user-defined, score −1000); the unknown, bos, eos and padding ids from the
// trainer spec; add_space_prefix from the normalizer spec; add_bos_token
// and add_eos_token from tokenizer_config.json where it says.
func MetaFromSentencePiece(model, tokenizerConfigJSON []byte, vocabSize int) (*meta.Map, error) {
	pieces, spec, err := parseSentencePiece(model)
	if err != nil {
		return nil, err
	}
	if vocabSize < len(pieces) {
		vocabSize = len(pieces)
	}
	if vocabSize > spMaxPieces {
		return nil, fmt.Errorf("tokenizer.model: vocabulary of %d is over %d", vocabSize, spMaxPieces)
	}
	tokens := make([]string, vocabSize)
	scores := make([]float32, vocabSize)
	types := make([]int32, vocabSize)
	for i := range tokens {
		if i < len(pieces) {
			tokens[i], scores[i], types[i] = pieces[i].text, pieces[i].score, pieces[i].typ
			continue
		}
		tokens[i], scores[i], types[i] = fmt.Sprintf("[PAD%d]", i), -10000, 5
	}
	m := &meta.Map{}
	var cfg struct {
		AddBOS *bool `json:"add_bos_token"`
		AddEOS *bool `json:"add_eos_token"`
		Added  map[string]struct {
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens_decoder"`
	}
	if tokenizerConfigJSON != nil {
		if err := json.Unmarshal(tokenizerConfigJSON, &cfg); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	for key, a := range cfg.Added {
		var id int
		if _, err := fmt.Sscanf(key, "%d", &id); err != nil || fmt.Sprint(id) != key || id < 0 {
			return nil, fmt.Errorf("tokenizer_config.json: added token id %q", key)
		}
		if id >= vocabSize {
			return nil, fmt.Errorf("tokenizer_config.json: added token %q has id %d, past the vocabulary of %d", a.Content, id, vocabSize)
		}
		tokens[id], scores[id], types[id] = a.Content, -1000, 4
		if a.Special {
			types[id] = 3
		}
	}
	m.Set("tokenizer.ggml.model", meta.Str("llama"))
	m.Set("tokenizer.ggml.pre", meta.Str("default"))
	m.Set("tokenizer.ggml.tokens", meta.Strs(tokens))
	m.Set("tokenizer.ggml.scores", meta.F32s(scores))
	m.Set("tokenizer.ggml.token_type", meta.I32s(types))
	for _, s := range []struct {
		key string
		id  int64
	}{{"unknown", spec.unk}, {"bos", spec.bos}, {"eos", spec.eos}, {"padding", spec.pad}} {
		if s.id >= 0 && s.id < int64(vocabSize) {
			m.Set("tokenizer.ggml."+s.key+"_token_id", meta.U32(uint32(s.id)))
		}
	}
	m.Set("tokenizer.ggml.add_space_prefix", meta.B(spec.addPrefix))
	if cfg.AddBOS != nil {
		m.Set("tokenizer.ggml.add_bos_token", meta.B(*cfg.AddBOS))
	}
	if cfg.AddEOS != nil {
		m.Set("tokenizer.ggml.add_eos_token", meta.B(*cfg.AddEOS))
	}
	return m, nil
}

type spPiece struct {
	text  string
	score float32
	typ   int32
}

type spSpec struct {
	unk, bos, eos, pad int64
	addPrefix          bool
}

// parseSentencePiece reads the pieces and the specs' fields above,
// skipping every other field as protobuf readers do.
func parseSentencePiece(b []byte) ([]spPiece, spSpec, error) {
	spec := spSpec{unk: 0, bos: 1, eos: 2, pad: -1, addPrefix: true}
	var pieces []spPiece
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			if len(pieces) >= spMaxPieces {
				return fmt.Errorf("more than %d pieces", spMaxPieces)
			}
			p, err := parsePiece(v)
			if err != nil {
				return fmt.Errorf("piece %d: %w", len(pieces), err)
			}
			pieces = append(pieces, p)
		case num == 2 && typ == protowire.BytesType:
			return eachField(v, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
				if typ != protowire.VarintType {
					return nil
				}
				id := int64(int32(x)) // int32 fields: negatives are ten-byte varints
				switch num {
				case 40:
					spec.unk = id
				case 41:
					spec.bos = id
				case 42:
					spec.eos = id
				case 43:
					spec.pad = id
				}
				return nil
			})
		case num == 3 && typ == protowire.BytesType:
			return eachField(v, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
				if num == 3 && typ == protowire.VarintType {
					spec.addPrefix = x != 0
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, spec, fmt.Errorf("tokenizer.model: %w", err)
	}
	if len(pieces) == 0 {
		return nil, spec, errors.New("tokenizer.model: no pieces (not a SentencePiece model?)")
	}
	seen := make(map[string]int, len(pieces))
	for i, p := range pieces {
		if j, dup := seen[p.text]; dup {
			return nil, spec, fmt.Errorf("tokenizer.model: piece %q is both id %d and %d", p.text, j, i)
		}
		seen[p.text] = i
	}
	return pieces, spec, nil
}

func parsePiece(b []byte) (spPiece, error) {
	p := spPiece{typ: 1}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			if !utf8.Valid(v) {
				return errors.New("not UTF-8")
			}
			p.text = string(v)
		case num == 2 && typ == protowire.Fixed32Type:
			p.score = math.Float32frombits(uint32(x))
		case num == 3 && typ == protowire.VarintType:
			if x < 1 || x > 6 {
				return fmt.Errorf("type %d", x)
			}
			p.typ = int32(x)
		}
		return nil
	})
	if err == nil && p.text == "" {
		err = errors.New("empty piece")
	}
	return p, err
}

// eachField calls f for each field of the message b: v is a length-
// delimited field's bytes, x a varint's or fixed field's value; groups are
// refused (sentencepiece has none).
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var u uint32
			u, n = protowire.ConsumeFixed32(b)
			x = uint64(u)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			return fmt.Errorf("field %d: wire type %d not read here", num, typ)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}
