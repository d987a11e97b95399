// Package tokenizer turns text into token ids and back the way llama.cpp does
// for GGUF vocabularies: SentencePiece-style "llama" (SPM), byte-level BPE
// "gpt2" with llama.cpp's per-model pre-tokenizers, and WordPiece "bert".
// All tables are built once in FromMeta; Encode and Decode only read them, so
// a Tokenizer is safe for concurrent use. FromHFJSON builds the same from a
// Hugging Face tokenizer.json (byte-level BPE).
package tokenizer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jitllm/jitllm/runtime/meta"
)

type vocabKind int

const (
	kindSPM vocabKind = iota
	kindBPE
	kindWPM
)

// Token attributes (llama_token_attr). A token type from the GGUF maps to
// one of the first six; the strip flags come from per-model rules.
type attr uint16

const (
	attrUndefined attr = 0
	attrUnknown   attr = 1 << 0
	attrUnused    attr = 1 << 1
	attrNormal    attr = 1 << 2
	attrControl   attr = 1 << 3
	attrUser      attr = 1 << 4
	attrByte      attr = 1 << 5
	attrLStrip    attr = 1 << 7
	attrRStrip    attr = 1 << 8
)

// Tokenizer encodes and decodes with one model's vocabulary.
type Tokenizer struct {
	kind   vocabKind
	tokens []string
	scores []float32
	attrs  []attr
	pieces [][]byte // decode bytes per id; empty for control and unknown
	toID   map[string]int32

	bos, eos, eot, eom, unk, sep int32
	addBOS, addEOS, addSep       bool
	addSpacePrefix               bool
	ignoreMerges                 bool
	eog                          map[int32]bool

	special   []int32 // control, user-defined and unknown ids, longest text first
	byteTok   [256]int32
	maxTokLen int

	// BPE
	ranks map[[2]string]int32
	pre   *preTokenizer

	// WPM
	lowercase, stripAccents bool
}

const null int32 = -1

// FromMeta builds a tokenizer from tokenizer.ggml.* metadata.
func FromMeta(m *meta.Map) (*Tokenizer, error) {
	if m == nil {
		return nil, errors.New("tokenizer: no metadata")
	}
	model, ok := m.String("tokenizer.ggml.model")
	if !ok {
		return nil, errors.New("tokenizer: missing tokenizer.ggml.model")
	}
	pre, _ := m.String("tokenizer.ggml.pre")
	t := &Tokenizer{eot: null, eom: null, sep: null}
	var pt preType
	switch model {
	case "llama":
		t.kind = kindSPM
		t.bos, t.eos, t.unk = 1, 2, 0
		t.addSpacePrefix, t.addBOS = true, true
	case "bert":
		t.kind = kindWPM
		t.bos, t.eos, t.unk, t.sep = 101, null, 100, 102
		t.addBOS, t.addSep = true, true
	case "gpt2":
		t.kind = kindBPE
		t.bos, t.eos, t.unk = 11, 11, null
		if pre == "" {
			pre = "default" // llama.cpp warns and falls back too
		}
		var ok bool
		if pt, ok = preTypes[pre]; !ok {
			return nil, fmt.Errorf("tokenizer: unsupported pre-tokenizer %q for gpt2 vocab", pre)
		}
		t.ignoreMerges, t.addBOS = pt.ignoreMerges, pt.addBOS
		if pt.chatGLM {
			t.bos = null
		}
	default:
		return nil, fmt.Errorf("tokenizer: unsupported tokenizer model %q (supported: llama, gpt2, bert)", model)
	}
	if v, ok := m.Bool("tokenizer.ggml.add_space_prefix"); ok {
		t.addSpacePrefix = v
	}

	toks, ok := m.Strings("tokenizer.ggml.tokens")
	if !ok || len(toks) == 0 {
		return nil, errors.New("tokenizer: missing tokenizer.ggml.tokens")
	}
	n := len(toks)
	t.tokens = make([]string, n)
	t.toID = make(map[string]int32, n)
	for i, s := range toks {
		if s == "" {
			s = fmt.Sprintf("[EMPTY_%d]", i)
		}
		if j, dup := t.toID[s]; dup {
			return nil, fmt.Errorf("tokenizer: duplicate token %q (ids %d and %d)", s, j, i)
		}
		t.tokens[i] = s
		t.toID[s] = int32(i)
		t.maxTokLen = max(t.maxTokLen, len(s))
	}
	if sc, ok := m.Float32s("tokenizer.ggml.scores"); ok {
		if len(sc) < n {
			return nil, fmt.Errorf("tokenizer: %d scores for %d tokens", len(sc), n)
		}
		t.scores = sc[:n]
	} else {
		t.scores = make([]float32, n)
	}
	t.attrs = make([]attr, n)
	types, hasTypes := m.Int32s("tokenizer.ggml.token_type")
	if hasTypes && len(types) < n {
		return nil, fmt.Errorf("tokenizer: %d token types for %d tokens", len(types), n)
	}
	for i := range t.attrs {
		if !hasTypes {
			t.attrs[i] = attrNormal
			continue
		}
		switch types[i] {
		case 1:
			t.attrs[i] = attrNormal
		case 2:
			t.attrs[i] = attrUnknown
		case 3:
			t.attrs[i] = attrControl
		case 4:
			t.attrs[i] = attrUser
		case 5:
			t.attrs[i] = attrUnused
		case 6:
			t.attrs[i] = attrByte
		default:
			t.attrs[i] = attrUndefined
		}
	}

	if t.kind == kindBPE {
		merges, ok := m.Strings("tokenizer.ggml.merges")
		if !ok {
			return nil, errors.New("tokenizer: gpt2 vocab without tokenizer.ggml.merges")
		}
		t.ranks = make(map[[2]string]int32, len(merges))
		for i, w := range merges {
			var k [2]string
			if len(w) > 1 {
				if p := strings.IndexByte(w[1:], ' '); p >= 0 {
					k = [2]string{w[:p+1], w[p+2:]}
				}
			}
			if _, dup := t.ranks[k]; !dup {
				t.ranks[k] = int32(i)
			}
		}
		var err error
		if t.pre, err = newPreTokenizer(pt.regexes); err != nil {
			return nil, err
		}
	}
	if t.kind == kindWPM {
		t.lowercase = true
		if v, ok := m.Bool("tokenizer.ggml.normalizer.lowercase"); ok {
			t.lowercase = v
		}
		t.stripAccents = t.lowercase
		if v, ok := m.Bool("tokenizer.ggml.normalizer.strip_accents"); ok {
			t.stripAccents = v
		}
	}

	t.readSpecialIDs(m)
	name, _ := m.String("general.name")
	t.detectSpecial(strings.ToLower(name), pre)
	t.buildBytes()
	t.buildPieces()
	return t, nil
}

func (t *Tokenizer) readSpecialIDs(m *meta.Map) {
	n := uint64(len(t.tokens))
	for _, p := range []*int32{&t.bos, &t.eos, &t.unk, &t.sep} {
		if *p >= 0 && uint64(*p) >= n {
			*p = null
		}
	}
	for key, p := range map[string]*int32{
		"tokenizer.ggml.bos_token_id":       &t.bos,
		"tokenizer.ggml.eos_token_id":       &t.eos,
		"tokenizer.ggml.eot_token_id":       &t.eot,
		"tokenizer.ggml.eom_token_id":       &t.eom,
		"tokenizer.ggml.unknown_token_id":   &t.unk,
		"tokenizer.ggml.seperator_token_id": &t.sep,
	} {
		if v, ok := m.Uint(key); ok && v < n {
			*p = int32(v)
		}
	}
	if v, ok := m.Bool("tokenizer.ggml.add_bos_token"); ok {
		t.addBOS = v
	}
	if v, ok := m.Bool("tokenizer.ggml.add_eos_token"); ok {
		t.addEOS = v
	}
	if v, ok := m.Bool("tokenizer.ggml.add_sep_token"); ok {
		t.addSep = v
	}
	// An add flag without its token would make Encode emit -1.
	if t.bos == null {
		t.addBOS = false
	}
	if t.eos == null {
		t.addEOS = false
	}
	if t.sep == null {
		t.addSep = false
	}
}

// VocabSize is the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// BOS is the beginning-of-sequence id, or -1.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS is the end-of-sequence id, or -1.
func (t *Tokenizer) EOS() int32 { return t.eos }

// AddBOS reports whether Encode with addSpecial prepends BOS (CLS for bert).
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// AddEOS reports whether Encode with addSpecial appends EOS.
func (t *Tokenizer) AddEOS() bool { return t.addEOS }

// IsEOG reports whether id ends generation (eos, eot, eom, <|im_end|> ...).
func (t *Tokenizer) IsEOG(id int32) bool { return id >= 0 && t.eog[id] }

// Token is the raw vocabulary string of id ("" when out of range).
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// Encode tokenizes text like llama_tokenize. addSpecial adds the vocab's
// BOS/EOS (CLS/SEP for bert) per its defaults; parseSpecial matches control
// and unknown tokens' text in the input (user-defined tokens always match).
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	var frags []fragment
	if text != "" {
		frags = t.partition(text, parseSpecial)
	}
	out := make([]int32, 0, len(text)/3+2)
	var err error
	switch t.kind {
	case kindSPM:
		out, err = t.encodeSPM(out, text, frags, addSpecial)
	case kindBPE:
		out, err = t.encodeBPE(out, text, frags, addSpecial)
	case kindWPM:
		out = t.encodeWPM(out, text, frags, addSpecial)
	}
	return out, err
}
