package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jitllm/jitllm/runtime/meta"
)

// Bounds on what a tokenizer.json may ask for. Every allocation in the
// conversion is proportional to the input's length or to these.
const (
	hfMaxVocab    = 1 << 22 // tokens; the largest real vocabularies have ~262k
	hfMaxGap      = 4096    // ids a vocabulary may leave unassigned beyond its entries
	hfMaxPreSteps = 16      // pre-tokenizers in a Sequence, nested ones included
)

type hfAddedToken struct {
	ID      int64  `json:"id"`
	Content string `json:"content"`
	Special bool   `json:"special"`
}

type hfPattern struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

// hfStep is one pre-tokenizer, decoder or post-processor object; only the
// fields the conversion looks at.
type hfStep struct {
	Type          string          `json:"type"`
	Pretokenizers []hfStep        `json:"pretokenizers"`
	Decoders      []hfStep        `json:"decoders"`
	Processors    []hfStep        `json:"processors"`
	Pattern       *hfPattern      `json:"pattern"`
	Behavior      string          `json:"behavior"`
	Invert        bool            `json:"invert"`
	UseRegex      *bool           `json:"use_regex"`
	Individual    bool            `json:"individual_digits"`
	Single        json.RawMessage `json:"single"`
}

type hfFile struct {
	AddedTokens   []hfAddedToken `json:"added_tokens"`
	PreTokenizer  *hfStep        `json:"pre_tokenizer"`
	PostProcessor *hfStep        `json:"post_processor"`
	Decoder       *hfStep        `json:"decoder"`
	Model         struct {
		Type         string          `json:"type"`
		Vocab        json.RawMessage `json:"vocab"`
		Merges       json.RawMessage `json:"merges"`
		ByteFallback bool            `json:"byte_fallback"`
	} `json:"model"`
}

// FromHFJSON builds a tokenizer from a Hugging Face tokenizer.json (and,
// optionally, its tokenizer_config.json, which may be nil). Only byte-level
// BPE tokenizers are supported (GPT-2 style: ByteLevel pre-tokenizer and
// decoder). The result is what FromMeta gives for the GGUF that llama.cpp's
// convert_hf_to_gguf.py would write from the same files; see MetaFromHFJSON.
func FromHFJSON(tokenizerJSON, tokenizerConfigJSON []byte) (*Tokenizer, error) {
	m, err := MetaFromHFJSON(tokenizerJSON, tokenizerConfigJSON)
	if err != nil {
		return nil, err
	}
	return FromMeta(m)
}

// MetaFromHFJSON converts a tokenizer.json (plus optional
// tokenizer_config.json) into tokenizer.ggml.* metadata the way
// convert_hf_to_gguf.py does for a "gpt2" vocabulary:
//
//   - tokens: by id; an added token's content replaces the vocab entry, ids
//     nobody has become "[PAD<id>]" (type unused);
//   - token_type: 1 normal, 3 control for added tokens flagged special or
//     that look special (<|...|>, <｜...｜>, <pad>, <mask>, <unused...>), 4
//     user-defined for the other added tokens;
//   - merges: "left right", with spaces inside a pair's parts written as
//     U+0120 (as gguf-py does for the list-of-pairs format);
//   - tokenizer.ggml.pre: llama.cpp picks it by hashing a test tokenization;
//     here it is picked by the pre-tokenizer's regexes (llama3 → llama-bpe,
//     qwen2 → qwen2, ...), and an unrecognised pre-tokenizer is an error as
//     it is in llama.cpp;
//   - bos/eos/unk/sep/pad ids and add_bos/add_eos from tokenizer_config.json
//     and the post-processor template, as gguf-py's SpecialVocab reads them.
//
// The vocabulary size is the highest id + 1: convert_hf_to_gguf.py pads to
// config.json's vocab_size, which these two files do not carry.
func MetaFromHFJSON(tokenizerJSON, tokenizerConfigJSON []byte) (*meta.Map, error) {
	var f hfFile
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if f.Model.Type != "BPE" {
		return nil, fmt.Errorf("tokenizer.json: model type %q is not supported (only byte-level BPE)", f.Model.Type)
	}
	if f.Model.ByteFallback {
		return nil, errors.New("tokenizer.json: BPE with byte_fallback is SentencePiece-style, not byte-level; not supported")
	}
	pre, err := hfPreName(f.PreTokenizer)
	if err != nil {
		return nil, err
	}
	if f.Decoder != nil && !hfHasByteLevel(f.Decoder, 0) {
		return nil, fmt.Errorf("tokenizer.json: decoder %q is not ByteLevel", f.Decoder.Type)
	}

	tokens, types, err := hfTokens(f.Model.Vocab, f.AddedTokens)
	if err != nil {
		return nil, err
	}
	merges, err := hfMerges(f.Model.Merges)
	if err != nil {
		return nil, err
	}

	m := &meta.Map{}
	m.Set("tokenizer.ggml.model", meta.Str("gpt2"))
	m.Set("tokenizer.ggml.pre", meta.Str(pre))
	m.Set("tokenizer.ggml.tokens", meta.Strs(tokens))
	m.Set("tokenizer.ggml.token_type", meta.I32s(types))
	m.Set("tokenizer.ggml.merges", meta.Strs(merges))
	if err := hfSpecials(m, &f, tokenizerConfigJSON, len(tokens)); err != nil {
		return nil, err
	}
	return m, nil
}

// hfTokens lays out the vocabulary by id.
func hfTokens(vocabJSON json.RawMessage, added []hfAddedToken) ([]string, []int32, error) {
	if len(bytes.TrimSpace(vocabJSON)) == 0 {
		return nil, nil, errors.New("tokenizer.json: model has no vocab")
	}
	var vocab map[string]int64
	if err := json.Unmarshal(vocabJSON, &vocab); err != nil {
		return nil, nil, fmt.Errorf("tokenizer.json: model.vocab: %w", err)
	}
	entries := len(vocab) + len(added)
	if entries == 0 {
		return nil, nil, errors.New("tokenizer.json: empty vocabulary")
	}
	// text -> id as transformers' get_vocab() sees it: added tokens win.
	const (
		fromVocab = iota
		fromAdded
	)
	maxID := int64(-1)
	bad := func(id int64) bool {
		maxID = max(maxID, id)
		return id < 0 || id >= hfMaxVocab || id >= int64(entries)+hfMaxGap
	}
	for s, id := range vocab {
		if bad(id) {
			return nil, nil, fmt.Errorf("tokenizer.json: token %q has id %d (vocabulary of %d entries)", s, id, entries)
		}
	}
	for _, a := range added {
		if bad(a.ID) {
			return nil, nil, fmt.Errorf("tokenizer.json: added token %q has id %d (vocabulary of %d entries)", a.Content, a.ID, entries)
		}
	}
	n := int(maxID + 1)
	tokens := make([]string, n)
	src := make([]int8, n) // -1 unassigned
	for i := range src {
		src[i] = -1
	}
	for s, id := range vocab {
		if src[id] >= 0 {
			return nil, nil, fmt.Errorf("tokenizer.json: id %d is both %q and %q", id, tokens[id], s)
		}
		tokens[id], src[id] = s, fromVocab
	}
	addedAt := make(map[string]int64, len(added))
	special := make(map[int64]bool, len(added))
	for _, a := range added {
		if src[a.ID] == fromAdded && tokens[a.ID] != a.Content {
			return nil, nil, fmt.Errorf("tokenizer.json: id %d is both added token %q and %q", a.ID, tokens[a.ID], a.Content)
		}
		// The same text under another id disappears from get_vocab().
		if prev, ok := vocab[a.Content]; ok && prev != a.ID && src[prev] == fromVocab {
			src[prev] = -1
		}
		if prev, ok := addedAt[a.Content]; ok && prev != a.ID {
			src[prev] = -1
		}
		tokens[a.ID], src[a.ID] = a.Content, fromAdded
		addedAt[a.Content] = a.ID
		special[a.ID] = a.Special
	}
	types := make([]int32, n)
	for i := range tokens {
		switch src[i] {
		case -1:
			tokens[i], types[i] = fmt.Sprintf("[PAD%d]", i), 5
		case fromVocab:
			types[i] = 1
		case fromAdded:
			if special[int64(i)] || hfLooksSpecial(tokens[i]) {
				types[i] = 3
			} else {
				tokens[i] = strings.ReplaceAll(tokens[i], "▁", " ")
				types[i] = 4
			}
		}
	}
	return tokens, types, nil
}

// hfLooksSpecial is convert_hf_to_gguf.py's does_token_look_special.
func hfLooksSpecial(s string) bool {
	switch s {
	case "<pad>", "<mask>", "<2mass>", "[@BOS@]":
		return true
	}
	return strings.HasPrefix(s, "<|") && strings.HasSuffix(s, "|>") ||
		strings.HasPrefix(s, "<｜") && strings.HasSuffix(s, "｜>") ||
		strings.HasPrefix(s, "<unused") && strings.HasSuffix(s, ">")
}

// hfMerges accepts both merge formats: "a b" strings and [a, b] pairs.
func hfMerges(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("tokenizer.json: BPE model without merges")
	}
	if len(raw) < 2 || raw[0] != '[' {
		return nil, errors.New("tokenizer.json: model.merges is not a list")
	}
	first := bytes.TrimSpace(raw[1:])
	if len(first) > 0 && first[0] == '[' {
		var pairs [][]string
		if err := json.Unmarshal(raw, &pairs); err != nil {
			return nil, fmt.Errorf("tokenizer.json: model.merges: %w", err)
		}
		out := make([]string, len(pairs))
		for i, p := range pairs {
			if len(p) != 2 || p[0] == "" || p[1] == "" {
				return nil, fmt.Errorf("tokenizer.json: merge %d is not a pair of non-empty strings", i)
			}
			out[i] = strings.ReplaceAll(p[0], " ", "Ġ") + " " + strings.ReplaceAll(p[1], " ", "Ġ")
		}
		return out, nil
	}
	var out []string
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("tokenizer.json: model.merges: %w", err)
	}
	for i, s := range out {
		if len(s) < 3 || strings.IndexByte(s[1:len(s)-1], ' ') < 0 {
			return nil, fmt.Errorf("tokenizer.json: merge %d (%q) is not \"left right\"", i, s)
		}
	}
	return out, nil
}

func hfHasByteLevel(s *hfStep, depth int) bool {
	if s.Type == "ByteLevel" {
		return true
	}
	if depth > hfMaxPreSteps {
		return false
	}
	for i := range s.Decoders {
		if hfHasByteLevel(&s.Decoders[i], depth+1) {
			return true
		}
	}
	return false
}

// hfPreNames maps a tokenizer.json pre-tokenizer, written as its split
// regexes in llama.cpp's spelling and joined by "\x00", to the llama.cpp
// pre-tokenizer that uses the same regexes. Entries ending in "\x00bl" are
// a final ByteLevel with use_regex (its own GPT-2 regex).
var hfPreNames = map[string]string{
	reLlama3: "llama-bpe",
	reQwen2:  "qwen2",
	reQwen35: "qwen35",
	`\p{N}{1,3}` + "\x00" + `[一-龥぀-ゟ゠-ヿ]+` + "\x00" + reDSv3: "deepseek-v3",
	"\x00bl":               "gpt-2",
	`\p{N}` + "\x00\x00bl": "starcoder", // Digits(individual) + ByteLevel: starcoder, refact, command-r, smollm
}

// hfRegex rewrites a Hugging Face (Rust regex) split pattern into llama.cpp's
// spelling of the same pattern.
func hfRegex(s string) string {
	s = strings.ReplaceAll(s, `(?i:'s|'t|'re|'ve|'m|'ll|'d)`, `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])`)
	s = strings.ReplaceAll(s, "\r", `\r`)
	return strings.ReplaceAll(s, "\n", `\n`)
}

func hfPreName(p *hfStep) (string, error) {
	if p == nil {
		return "", errors.New("tokenizer.json: no pre_tokenizer (a byte-level BPE needs ByteLevel)")
	}
	var steps []*hfStep
	var flatten func(s *hfStep, depth int) error
	flatten = func(s *hfStep, depth int) error {
		if s.Type != "Sequence" {
			if len(steps) >= hfMaxPreSteps {
				return errors.New("tokenizer.json: too many pre-tokenizers")
			}
			steps = append(steps, s)
			return nil
		}
		if depth >= 4 {
			return errors.New("tokenizer.json: pre-tokenizer Sequences nested too deep")
		}
		for i := range s.Pretokenizers {
			if err := flatten(&s.Pretokenizers[i], depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := flatten(p, 0); err != nil {
		return "", err
	}
	var key []string
	for i, s := range steps {
		switch s.Type {
		case "Split":
			if s.Pattern == nil || s.Pattern.Regex == nil || s.Behavior != "Isolated" || s.Invert {
				return "", fmt.Errorf("tokenizer.json: unsupported Split pre-tokenizer (behavior %q, invert %v)", s.Behavior, s.Invert)
			}
			key = append(key, hfRegex(*s.Pattern.Regex))
		case "Digits":
			if !s.Individual {
				return "", errors.New("tokenizer.json: Digits pre-tokenizer without individual_digits is not supported")
			}
			key = append(key, `\p{N}`)
		case "ByteLevel":
			if i != len(steps)-1 {
				return "", errors.New("tokenizer.json: ByteLevel must be the last pre-tokenizer")
			}
			if s.UseRegex == nil || *s.UseRegex {
				key = append(key, "bl")
			}
		default:
			return "", fmt.Errorf("tokenizer.json: unsupported pre-tokenizer %q", s.Type)
		}
	}
	if len(steps) == 0 || steps[len(steps)-1].Type != "ByteLevel" {
		return "", errors.New("tokenizer.json: pre-tokenizer has no ByteLevel step; only byte-level BPE is supported")
	}
	if len(key) == 0 {
		return "", errors.New("tokenizer.json: pre-tokenizer does not split the text; not supported")
	}
	if key[len(key)-1] == "bl" {
		key[len(key)-1] = "\x00bl"
	}
	k := strings.Join(key, "\x00")
	name, ok := hfPreNames[k]
	if !ok {
		return "", fmt.Errorf("tokenizer.json: pre-tokenizer not recognised (regexes %q)", strings.Split(k, "\x00"))
	}
	return name, nil
}

// hfTokenName reads a tokenizer_config.json *_token entry: a string or an
// AddedToken object with "content".
func hfTokenName(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, s != ""
	}
	var o struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &o) == nil && o.Content != nil {
		return *o.Content, *o.Content != ""
	}
	return "", false
}

// hfSpecials follows gguf-py's SpecialVocab._try_load_from_tokenizer_json:
// token names come from tokenizer_config.json (or, without one, from the
// post-processor's template) and are looked up among the added tokens;
// add_bos/add_eos come from the template and then the config's
// add_*_token flags.
func hfSpecials(m *meta.Map, f *hfFile, configJSON []byte, n int) error {
	var cfg map[string]json.RawMessage
	if len(configJSON) > 0 {
		if err := json.Unmarshal(configJSON, &cfg); err != nil {
			return fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	names := map[string]string{}
	for _, typ := range []string{"bos", "eos", "unk", "sep", "pad", "cls"} {
		if raw, ok := cfg[typ+"_token"]; ok {
			if s, ok := hfTokenName(raw); ok {
				names[typ] = s
			}
		}
	}
	if names["bos"] == "" && names["cls"] != "" {
		names["bos"] = names["cls"]
	}
	if names["eos"] == "" && names["sep"] != "" {
		names["eos"] = names["sep"]
	}
	addFlag := map[string]bool{}
	if pp := f.PostProcessor; pp != nil {
		procs := []hfStep{*pp}
		if pp.Type == "Sequence" {
			procs = pp.Processors
		}
		for _, p := range procs {
			if p.Type != "TemplateProcessing" || len(p.Single) == 0 {
				continue
			}
			var single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
			}
			if json.Unmarshal(p.Single, &single) != nil || len(single) < 2 {
				continue
			}
			if st := single[0].SpecialToken; st != nil && st.ID != "" {
				if cfg == nil {
					names["bos"] = st.ID
				}
				addFlag["bos"] = st.ID == names["bos"] || st.ID == names["cls"]
			}
			if st := single[len(single)-1].SpecialToken; st != nil && st.ID != "" {
				if cfg == nil {
					names["eos"] = st.ID
				}
				addFlag["eos"] = st.ID == names["eos"]
			}
		}
	}
	for _, typ := range []string{"bos", "eos"} {
		if raw, ok := cfg["add_"+typ+"_token"]; ok {
			var b bool
			if json.Unmarshal(raw, &b) == nil {
				addFlag[typ] = b
			}
		}
		if v, ok := addFlag[typ]; ok {
			m.Set("tokenizer.ggml.add_"+typ+"_token", meta.B(v))
		}
	}
	keys := map[string]string{
		"bos": "tokenizer.ggml.bos_token_id",
		"eos": "tokenizer.ggml.eos_token_id",
		"unk": "tokenizer.ggml.unknown_token_id",
		"sep": "tokenizer.ggml.seperator_token_id",
		"pad": "tokenizer.ggml.padding_token_id",
	}
	for _, typ := range []string{"bos", "eos", "unk", "sep", "pad"} {
		name, ok := names[typ]
		if !ok {
			continue
		}
		for _, a := range f.AddedTokens { // first match, as gguf-py
			if a.Content == name {
				if a.ID >= 0 && a.ID < int64(n) {
					m.Set(keys[typ], meta.U32(uint32(a.ID)))
				}
				break
			}
		}
	}
	return nil
}
