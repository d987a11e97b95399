package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jitllm/jitllm/runtime/gguf"
	"github.com/jitllm/jitllm/runtime/meta"
)

const testdata = "../../testdata"

func readMeta(path string) (*meta.Map, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Meta, nil
}

var cache sync.Map // path -> func() (*Tokenizer, error)

func load(t testing.TB, path string) *Tokenizer {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if strings.HasSuffix(path, ".tokenizer.json.gz") { // in the repo, unlike some GGUFs
			t.Fatal(err)
		}
		t.Skipf("missing %s", path)
	}
	f, _ := cache.LoadOrStore(path, sync.OnceValues(func() (*Tokenizer, error) {
		if strings.HasSuffix(path, ".tokenizer.json.gz") {
			return readHF(path)
		}
		m, err := readMeta(path)
		if err != nil {
			return nil, err
		}
		return FromMeta(m)
	}))
	tk, err := f.(func() (*Tokenizer, error))()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return tk
}

func vocabPath(name string) string {
	return filepath.Join(testdata, "vocab", "ggml-vocab-"+name+".gguf")
}

// TestVocabInpOut checks llama.cpp's test-tokenizer-0 vectors (produced
// without special tokens: add_special=false, parse_special=false).
func TestVocabInpOut(t *testing.T) {
	inps, _ := filepath.Glob(filepath.Join(testdata, "vocab", "*.gguf.inp"))
	if len(inps) == 0 {
		t.Fatal("no .inp files")
	}
	for _, inp := range inps {
		gg := strings.TrimSuffix(inp, ".inp")
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(gg), "ggml-vocab-"), ".gguf")
		t.Run(name, func(t *testing.T) {
			src := gg
			if _, err := os.Stat(gg); err != nil {
				hf, ok := hfVocabs[name]
				if !ok {
					reason := noVocab[name]
					if reason == "" {
						reason = "no GGUF and no tokenizer.json for this vocab"
					}
					t.Skipf("%s: %s", filepath.Base(gg), reason)
				}
				src = hf
			}
			tk := load(t, src)
			checkInpOut(t, tk, inp)
		})
	}
}

// checkInpOut encodes every input of a .inp file and compares with .out.
func checkInpOut(t *testing.T, tk *Tokenizer, inp string) {
	t.Helper()
	ib, err := os.ReadFile(inp)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := os.ReadFile(strings.TrimSuffix(inp, ".inp") + ".out")
	if err != nil {
		t.Fatal(err)
	}
	texts := strings.Split(string(ib), "\n__ggml_vocab_test__\n")
	texts = texts[:len(texts)-1]
	lines := strings.Split(strings.TrimSuffix(string(ob), "\n"), "\n")
	if len(texts) != len(lines) {
		t.Fatalf("%d inputs, %d outputs", len(texts), len(lines))
	}
	fails := 0
	for i, text := range texts {
		var want []int32
		for _, f := range strings.Fields(lines[i]) {
			v, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, int32(v))
		}
		got, err := tk.Encode(text, false, false)
		if err != nil {
			t.Errorf("%q: %v", text, err)
			continue
		}
		if !slices.Equal(got, want) {
			fails++
			t.Errorf("%q:\n got %v\nwant %v", text, got, want)
		}
	}
	if fails > 0 {
		t.Logf("%d/%d failed", fails, len(texts))
	}
}

type refFile struct {
	ModelFile string `json:"model_file"`
	Cases     []struct {
		Input    string  `json:"input"`
		Hex      string  `json:"input_utf8_hex"`
		IDs      []int32 `json:"ids"`
		IDsNoBOS []int32 `json:"ids_no_bos"`
	} `json:"cases"`
}

// TestRefs checks llama-tokenize output (special tokens parsed; with and
// without the model's BOS).
func TestRefs(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(testdata, "refs", "vocab", "*.tokenize.json"))
	files = append(files, filepath.Join(testdata, "refs", "stories260K", "tokenize.json"),
		filepath.Join(testdata, "refs", "llama-2-tiny-random.tokenize.json"))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var ref refFile
		if err := json.Unmarshal(b, &ref); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		model := filepath.Join(testdata, strings.TrimPrefix(strings.TrimPrefix(ref.ModelFile, "shared/"), "models/"))
		t.Run(filepath.Base(model), func(t *testing.T) {
			tk := load(t, model)
			for _, c := range ref.Cases {
				if fmt.Sprintf("%x", c.Input) != c.Hex {
					t.Fatalf("input %q does not match its hex", c.Input)
				}
				got, err := tk.Encode(c.Input, true, true)
				if err != nil || !slices.Equal(got, c.IDs) {
					t.Errorf("%q with BOS:\n got %v %v\nwant %v", c.Input, got, err, c.IDs)
				}
				got, err = tk.Encode(c.Input, false, true)
				if err != nil || !slices.Equal(got, c.IDsNoBOS) {
					t.Errorf("%q no BOS:\n got %v %v\nwant %v", c.Input, got, err, c.IDsNoBOS)
				}
			}
		})
	}
}

func metaStr(s string) meta.Value { return meta.Str(s) }

func BenchmarkEncode(b *testing.B) {
	text := strings.Repeat("Hello world, this is a test 12345 — ünïcödé 你好 🦙.\n", 64)
	for _, name := range []string{"llama-spm", "gpt-2", "deepseek-llm"} {
		tk := load(b, vocabPath(name))
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				if _, err := tk.Encode(text, true, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
