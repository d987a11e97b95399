package tokenizer

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/jitllm/jitllm/runtime/tokenizer/tokenizertest"
)

// A SentencePiece model made from a GGUF's llama tokenizer converts back to
// the same metadata (tokens, scores, types, special ids) and so to a
// tokenizer that encodes text as the GGUF's does; padded past its pieces
// and with tokenizer_config.json's added tokens, as convert_hf_to_gguf.py
// pads and adds.
func TestSentencePieceMatchesGGUF(t *testing.T) {
	for _, path := range []string{"../../testdata/stories260K.gguf", "../../testdata/llama-2-tiny-random.gguf"} {
		want, err := readMeta(path)
		if err != nil {
			t.Fatal(err)
		}
		tv, _ := want.Get("tokenizer.ggml.tokens")
		n := tv.Len()
		got, err := MetaFromSentencePiece(tokenizertest.SentencePiece(want), nil, n)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
			"tokenizer.ggml.unknown_token_id", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"} {
			w, _ := want.Get(key)
			g, ok := got.Get(key)
			if !ok || !g.Equal(w) {
				t.Errorf("%s: %s = %.80s, want %.80s", path, key, g.String(), w.String())
			}
		}
		wt, err := FromMeta(want)
		if err != nil {
			t.Fatal(err)
		}
		gt, err := FromMeta(got)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range []string{"Once upon a time, there was a little girl named Lily.", "  two  spaces\nand a line", "Üñïçødé ☃ 123"} {
			a, err1 := wt.Encode(text, true, false)
			b, err2 := gt.Encode(text, true, false)
			if err1 != nil || err2 != nil || !slices.Equal(a, b) {
				t.Errorf("%s: %q encodes to %v (%v), the GGUF's to %v (%v)", path, text, b, err2, a, err1)
			}
		}
		// padded to a larger vocabulary, an added special token over a pad
		cfg := []byte(`{"add_bos_token": true, "add_eos_token": false, "added_tokens_decoder": {"` + strconv.Itoa(n+1) + `": {"content": "<|im_end|>", "special": true}}}`)
		pm, err := MetaFromSentencePiece(tokenizertest.SentencePiece(want), cfg, n+4)
		if err != nil {
			t.Fatal(err)
		}
		toks, _ := pm.Strings("tokenizer.ggml.tokens")
		types, _ := pm.Int32s("tokenizer.ggml.token_type")
		if len(toks) != n+4 || toks[n] != "[PAD"+strconv.Itoa(n)+"]" || types[n] != 5 || toks[n+1] != "<|im_end|>" || types[n+1] != 3 {
			t.Errorf("%s: padded tail %q, types %v", path, toks[n:], types[n:])
		}
		if v, ok := pm.Bool("tokenizer.ggml.add_bos_token"); !ok || !v {
			t.Errorf("%s: add_bos_token %v, %v", path, v, ok)
		}
	}
}

// Broken models are refused with a reason, never a panic.
func TestSentencePieceRefuses(t *testing.T) {
	piece := func(fields ...[]byte) []byte {
		var p []byte
		for _, f := range fields {
			p = append(p, f...)
		}
		b := protowire.AppendTag(nil, 1, protowire.BytesType)
		return protowire.AppendBytes(b, p)
	}
	text := func(s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), s)
	}
	typ := func(v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), v)
	}
	score := func(f float32) []byte {
		return protowire.AppendFixed32(protowire.AppendTag(nil, 2, protowire.Fixed32Type), math.Float32bits(f))
	}
	good := slices.Concat(piece(text("<unk>"), typ(2)), piece(text("a"), score(-1)))
	if _, err := MetaFromSentencePiece(good, nil, 2); err != nil {
		t.Fatalf("a good model: %v", err)
	}
	for name, c := range map[string]struct {
		model []byte
		cfg   string
		want  string
	}{
		"empty":          {nil, "", "no pieces"},
		"truncated":      {good[:len(good)-2], "", "tokenizer.model"},
		"bad tag":        {[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, "", "tokenizer.model"},
		"group":          {protowire.AppendTag(nil, 5, protowire.StartGroupType), "", "wire type"},
		"duplicate":      {slices.Concat(good, piece(text("a"))), "", "both id"},
		"empty piece":    {slices.Concat(good, piece(score(1))), "", "empty piece"},
		"bad type":       {slices.Concat(good, piece(text("b"), typ(9))), "", "type 9"},
		"not utf-8":      {slices.Concat(good, piece(text("\xff"))), "", "UTF-8"},
		"added past end": {good, `{"added_tokens_decoder": {"7": {"content": "x"}}}`, "past the vocabulary"},
		"added bad id":   {good, `{"added_tokens_decoder": {"-1": {"content": "x"}}}`, "added token id"},
		"config":         {good, `[`, "tokenizer_config.json"},
	} {
		var cfg []byte
		if c.cfg != "" {
			cfg = []byte(c.cfg)
		}
		if _, err := MetaFromSentencePiece(c.model, cfg, 2); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error about %q", name, err, c.want)
		}
	}
	if _, err := MetaFromSentencePiece(good, nil, spMaxPieces+1); err == nil {
		t.Error("a vocabulary past spMaxPieces accepted")
	}
}

// FuzzSentencePiece: any bytes are refused or give metadata that builds a
// tokenizer with a token for every piece.
func FuzzSentencePiece(f *testing.F) {
	m, err := readMeta("../../testdata/stories260K.gguf")
	if err != nil {
		f.Fatal(err)
	}
	model := tokenizertest.SentencePiece(m)
	f.Add(model)
	f.Add(model[:len(model)/2])
	f.Add([]byte{0x0a, 0x03, 0x0a, 0x01, 'a'})
	f.Fuzz(func(t *testing.T, b []byte) {
		md, err := MetaFromSentencePiece(b, nil, 0)
		if err != nil {
			return
		}
		toks, _ := md.Strings("tokenizer.ggml.tokens")
		if len(toks) == 0 {
			t.Fatal("accepted with no tokens")
		}
		if _, err := FromMeta(md); err != nil && !strings.Contains(err.Error(), "tokenizer") {
			t.Fatalf("FromMeta: %v", err)
		}
	})
}
