package safetensors

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func writeIndex(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "model.safetensors.index.json")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadIndex(t *testing.T) {
	p := writeIndex(t, `{
  "metadata": {"total_size": 123456, "nested": [1, {"x": null}]},
  "weight_map": {
    "lm_head.weight": "model-00002-of-00002.safetensors",
    "model.embed_tokens.weight": "model-00001-of-00002.safetensors"
  }
}
`)
	m, err := ReadIndex(p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"lm_head.weight":            "model-00002-of-00002.safetensors",
		"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("ReadIndex = %v, want %v", m, want)
	}
}

func TestReadIndexHostile(t *testing.T) {
	cases := []struct{ name, body, want string }{
		{"empty", ``, "end of JSON"},
		{"not JSON", `nope`, "invalid"},
		{"not an object", `["a"]`, "want"},
		{"no weight_map", `{"metadata":{}}`, "no weight_map"},
		{"empty weight_map", `{"weight_map":{}}`, "empty"},
		{"weight_map not object", `{"weight_map":["a.safetensors"]}`, "weight_map"},
		{"value not string", `{"weight_map":{"a":1}}`, "want a string"},
		{"value null", `{"weight_map":{"a":null}}`, "want a string"},
		{"duplicate tensor", `{"weight_map":{"a":"x.safetensors","a":"y.safetensors"}}`, "duplicate"},
		{"duplicate weight_map", `{"weight_map":{"a":"x.safetensors"},"weight_map":{"b":"x.safetensors"}}`, "duplicate"},
		{"empty tensor name", `{"weight_map":{"":"x.safetensors"}}`, "empty tensor name"},
		{"empty shard", `{"weight_map":{"a":""}}`, "empty shard"},
		{"dot shard", `{"weight_map":{"a":"."}}`, "not a file name"},
		{"dotdot shard", `{"weight_map":{"a":".."}}`, "plain file name"},
		{"parent path", `{"weight_map":{"a":"../secret.safetensors"}}`, "plain file name"},
		{"absolute path", `{"weight_map":{"a":"/etc/passwd"}}`, "plain file name"},
		{"subdirectory", `{"weight_map":{"a":"sub/x.safetensors"}}`, "plain file name"},
		{"backslash", `{"weight_map":{"a":"..\\x.safetensors"}}`, "plain file name"},
		{"nul", `{"weight_map":{"a":"x\u0000.safetensors"}}`, "NUL"},
		{"trailing garbage", `{"weight_map":{"a":"x.safetensors"}} x`, "trailing"},
		{"bad metadata JSON", `{"metadata":{"a":},"weight_map":{"a":"x.safetensors"}}`, "metadata"},
		{"invalid utf8", "{\"weight_map\":{\"a\xff\":\"x.safetensors\"}}", "UTF-8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := ReadIndex(writeIndex(t, c.body))
			if err == nil {
				t.Fatalf("ReadIndex = %v", m)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

func TestReadIndexTooBig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "model.safetensors.index.json")
	fh, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	// A sparse file: big on paper, cheap on disk.
	if err := fh.Truncate(maxIndex + 1); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	if _, err := ReadIndex(p); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("ReadIndex = %v, want a size error", err)
	}
	if _, err := ReadIndex(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("read a missing index")
	}
}
