package tokenizer

import (
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

var tricky = []string{
	"", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "a\r\nb\r\n", " \t \n ",
	"Hello world", " Hello world", "Hello  world  ", "  leading", "trailing   ",
	"line1\nline2\n\n\nline3", "tab\tseparated\tvalues",
	"0", "123", "1234567890", "3.14159 + 2,718 = 5.86", "٣٤٥ ۶۷",
	"Äpfel über Straße, café naïve résumé", "Cửa Việt", "нещо на Български", "Ελληνικά κείμενο",
	"我想在apple工作1314151天～", "日本語のテキスト、カタカナ", "한국어 텍스트",
	"🦙 llama", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "🇫🇷🇩🇪 flags", "😶‍🌫️ (multiple emojis)", "✅",
	"func main() {\n\tfmt.Println(\"hi\")\n}\n", "    indented\n        more", "if (a && b) { return x->y; }",
	"it's we'll they're I'd you've", "' era", "!!!!!!", "...", "¿Qué? ¡Sí!",
	"\u00a0nbsp\u00a0", "zero\u200bwidth", "\u3000ideographic space", "a\u0301 combining",
	"<s> not special </s>", "<|endoftext|> text", "\x00\x01\x7f control bytes",
}

func roundTripVocabs() []string {
	return []string{
		vocabPath("llama-spm"), vocabPath("phi-3"), vocabPath("baichuan"),
		filepath.Join(testdata, "stories260K.gguf"), filepath.Join(testdata, "llama-2-tiny-random.gguf"),
		vocabPath("gpt-2"), vocabPath("gpt-neox"), vocabPath("mpt"), vocabPath("falcon"), vocabPath("starcoder"),
		vocabPath("refact"), vocabPath("deepseek-coder"), vocabPath("deepseek-llm"),
		hfPath("llama3"), hfPath("qwen3"), hfPath("deepseek_v3"),
	}
}

// lossless reports whether s can survive a round trip: SPM vocabs without
// byte tokens (baichuan) map unseen characters to <unk>, and special-token
// text may become a control token whose piece is empty.
func lossless(tk *Tokenizer, ids []int32) bool {
	for _, id := range ids {
		if tk.attrs[id]&(attrUnknown|attrControl) != 0 && id != tk.bos && id != tk.eos {
			return false
		}
	}
	return true
}

func TestRoundTrip(t *testing.T) {
	for _, path := range roundTripVocabs() {
		t.Run(filepath.Base(path), func(t *testing.T) {
			tk := load(t, path)
			for _, s := range tricky {
				for _, bos := range []bool{false, true} {
					ids, err := tk.Encode(s, bos, false)
					if err != nil {
						t.Fatalf("%q: %v", s, err)
					}
					if !lossless(tk, ids) {
						if strings.Contains(path, "baichuan") || strings.ContainsAny(s, "<") {
							continue
						}
						t.Errorf("%q: lossy ids %v", s, ids)
					}
					if got := tk.Decode(ids); got != s {
						t.Errorf("bos=%v %q: decoded %q (ids %v)", bos, s, got, ids)
					}
				}
			}
		})
	}
}

func TestStream(t *testing.T) {
	for _, path := range roundTripVocabs() {
		t.Run(filepath.Base(path), func(t *testing.T) {
			tk := load(t, path)
			for _, s := range tricky {
				ids, err := tk.Encode(s, true, false)
				if err != nil {
					t.Fatal(err)
				}
				want := tk.Decode(ids)
				st := tk.NewStream()
				var b strings.Builder
				for _, id := range ids {
					chunk := st.Add(id)
					if utf8.ValidString(want) && !utf8.ValidString(chunk) {
						t.Errorf("%q: invalid UTF-8 chunk %q mid-stream", s, chunk)
					}
					b.WriteString(chunk)
				}
				b.WriteString(st.Flush())
				if b.String() != want {
					t.Errorf("%q: stream %q, Decode %q", s, b.String(), want)
				}
			}
		})
	}
}

// TestStreamHoldsPartialRune feeds an emoji as four byte-fallback tokens.
func TestStreamHoldsPartialRune(t *testing.T) {
	tk := load(t, vocabPath("llama-spm"))
	ids, err := tk.Encode("🦙!", false, false)
	if err != nil {
		t.Fatal(err)
	}
	nBytes := 0
	for _, id := range ids {
		if tk.attrs[id]&attrByte != 0 {
			nBytes++
		}
	}
	if nBytes != 4 {
		t.Fatalf("want the emoji as 4 byte tokens, got %v", ids)
	}
	st := tk.NewStream()
	var got []string
	for _, id := range ids {
		if c := st.Add(id); c != "" {
			got = append(got, c)
		}
	}
	if f := st.Flush(); f != "" {
		got = append(got, f)
	}
	if strings.Join(got, "") != "🦙!" || got[0] != "🦙" && got[0] != "🦙!" {
		t.Fatalf("chunks %q", got)
	}
	for _, c := range got {
		if !utf8.ValidString(c) {
			t.Fatalf("invalid chunk %q", c)
		}
	}
}

func TestPieceAndSpecials(t *testing.T) {
	tk := load(t, vocabPath("llama-spm"))
	if tk.BOS() != 1 || tk.EOS() != 2 || !tk.AddBOS() || tk.AddEOS() || tk.VocabSize() != 32000 {
		t.Fatalf("bos %d eos %d addBOS %v addEOS %v n %d", tk.BOS(), tk.EOS(), tk.AddBOS(), tk.AddEOS(), tk.VocabSize())
	}
	if len(tk.Piece(tk.BOS())) != 0 || !tk.IsEOG(tk.EOS()) || tk.IsEOG(tk.BOS()) || tk.IsEOG(-1) {
		t.Fatal("control token handling")
	}
	if tk.Token(1) != "<s>" || tk.Token(-5) != "" || tk.Piece(1<<30) != nil {
		t.Fatal("Token/Piece range")
	}
	if id := tk.toID["▁Hello"]; string(tk.Piece(id)) != " Hello" {
		t.Fatalf("piece %q", tk.Piece(id))
	}
	if n := testing.AllocsPerRun(100, func() { tk.Piece(15043) }); n != 0 {
		t.Fatalf("Piece allocates %v", n)
	}
	ids, _ := tk.Encode("<s>Hi</s>", false, true)
	if len(ids) < 3 || ids[0] != 1 || ids[len(ids)-1] != 2 {
		t.Fatalf("parseSpecial: %v", ids)
	}
	ids, _ = tk.Encode("<s>Hi", false, false)
	if ids[0] == 1 {
		t.Fatalf("special text parsed without parseSpecial: %v", ids)
	}
	phi := load(t, vocabPath("phi-3"))
	if id := phi.toID["<|end|>"]; !phi.IsEOG(id) {
		t.Fatal("<|end|> should end generation for phi-3")
	}
	bert := load(t, vocabPath("bert-bge"))
	ids, _ = bert.Encode("hello", true, false)
	if ids[0] != 101 || ids[len(ids)-1] != 102 {
		t.Fatalf("bert CLS/SEP: %v", ids)
	}
}

func TestUnsupported(t *testing.T) {
	m, err := readMeta(vocabPath("gpt-2"))
	if err != nil {
		t.Fatal(err)
	}
	m.Set("tokenizer.ggml.model", metaStr("t5"))
	if _, err := FromMeta(m); err == nil || !strings.Contains(err.Error(), "t5") {
		t.Fatalf("want unsupported model error, got %v", err)
	}
	m.Set("tokenizer.ggml.model", metaStr("gpt2"))
	m.Set("tokenizer.ggml.pre", metaStr("no-such-pre"))
	if _, err := FromMeta(m); err == nil || !strings.Contains(err.Error(), "no-such-pre") {
		t.Fatalf("want unsupported pre-tokenizer error, got %v", err)
	}
}

func FuzzEncode(f *testing.F) {
	for _, s := range tricky {
		f.Add(s)
	}
	tk := load(f, vocabPath("llama-spm"))
	bpe := load(f, vocabPath("gpt-2"))
	f.Fuzz(func(t *testing.T, s string) {
		for _, k := range []*Tokenizer{tk, bpe} {
			if _, err := k.Encode(s, true, true); err != nil {
				t.Fatal(err)
			}
			ids, err := k.Encode(s, false, false)
			if err != nil {
				t.Fatal(err)
			}
			if utf8.ValidString(s) && lossless(k, ids) {
				if got := k.Decode(ids); got != s {
					t.Fatalf("%q decoded %q (ids %v)", s, got, ids)
				}
			}
		}
	})
}

// A continuation stream keeps the first piece's leading space: after a
// prompt, " was" must print as " was".
func TestContinuationKeepsLeadingSpace(t *testing.T) {
	tk := load(t, "../../testdata/stories260K.gguf")
	ids, err := tk.Encode("was a dog", false, false)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	s := tk.NewContinuation()
	for _, id := range ids {
		got += s.Add(id)
	}
	got += s.Flush()
	if got != " was a dog" {
		t.Fatalf("continuation %q, want %q", got, " was a dog")
	}
	if d := tk.Decode(ids); d != "was a dog" {
		t.Fatalf("Decode %q", d)
	}
}
