package convert

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/jlm"
	"github.com/jitllm/jitllm/runtime/meta"
	"github.com/jitllm/jitllm/runtime/safetensors"
	"github.com/jitllm/jitllm/runtime/tokenizer"
)

// A Hugging Face checkpoint is a directory: config.json (the
// hyperparameters), the weights in model.safetensors or in shards listed by
// model.safetensors.index.json, tokenizer.json and tokenizer_config.json
// (special tokens, chat template). ConvertHF writes the .jlm that Convert
// would write from the GGUF llama.cpp's convert_hf_to_gguf.py makes of it:
// GGUF's keys, GGUF's tensor names and layout (q and k rows permuted to
// llama's adjacent rotary pairs where the graph declares it), the weights'
// own float type (F32, F16 or BF16; one-dimensional weights as F32, as
// ggml's norms read them).

// maxJSONFile bounds the checkpoint's JSON files (tokenizer.json of a
// 256k vocabulary is ~20 MiB).
const maxJSONFile = 256 << 20

// hfConfig is the part of config.json the families read.
type hfConfig struct {
	ModelType         string         `json:"model_type"`
	Architectures     []string       `json:"architectures"`
	VocabSize         int            `json:"vocab_size"`
	HiddenSize        int            `json:"hidden_size"`
	IntermediateSize  int            `json:"intermediate_size"`
	Layers            int            `json:"num_hidden_layers"`
	Heads             int            `json:"num_attention_heads"`
	KVHeads           int            `json:"num_key_value_heads"`
	HeadDim           int            `json:"head_dim"`
	RMSNormEps        float64        `json:"rms_norm_eps"`
	RopeTheta         float64        `json:"rope_theta"`
	MaxPositions      int            `json:"max_position_embeddings"`
	TieWordEmbeddings bool           `json:"tie_word_embeddings"`
	RopeScaling       map[string]any `json:"rope_scaling"`
	RopeParameters    map[string]any `json:"rope_parameters"` // transformers 5: rope_theta and the scaling together
}

// normalize reads the rotary settings wherever the config's transformers
// version put them: rope_theta and rope_scaling at the top (4.x, the
// scaling's type as "rope_type" or, older, "type") or in rope_parameters
// (5.x).
func (c *hfConfig) normalize() {
	if rp := c.RopeParameters; rp != nil {
		if v, ok := rp["rope_theta"].(float64); ok && c.RopeTheta == 0 {
			c.RopeTheta = v
		}
		if typ, _ := rp["rope_type"].(string); c.RopeScaling == nil && typ != "" && typ != "default" {
			c.RopeScaling = rp
		}
	}
	if rs := c.RopeScaling; rs != nil {
		if _, ok := rs["rope_type"]; !ok {
			rs["rope_type"] = rs["type"]
		}
	}
}

// hfArchitectures maps a config's model_type to the GGUF architecture
// llama.cpp converts it to, where the names differ.
var hfArchitectures = map[string]string{"mistral": "llama"}

// ConvertHF writes the Hugging Face checkpoint in dir as a .jlm at outPath,
// atomically as Convert does.
func ConvertHF(ctx context.Context, dir, outPath string, opts Options) error {
	if err := refuseExisting(outPath, opts.Force); err != nil {
		return err
	}
	outType, err := matrixType(opts.MatrixType)
	if err != nil {
		return err
	}
	ck, err := openCheckpoint(dir)
	if err != nil {
		return err
	}
	return writeAtomically(ctx, outPath, opts.Force, func(tmp *os.File, wrote func(int64)) error {
		if err := ck.write(ctx, tmp, opts, outType, wrote); err != nil {
			return fmt.Errorf("converting %s: %w", dir, err)
		}
		return nil
	})
}

// IsHFCheckpoint reports whether path is a Hugging Face checkpoint
// directory (it holds a config.json).
func IsHFCheckpoint(path string) bool {
	st, err := os.Stat(filepath.Join(path, "config.json"))
	return err == nil && st.Mode().IsRegular()
}

// hfTensor is one tensor of the checkpoint and the shard that holds it.
type hfTensor struct {
	shard string
	safetensors.Tensor
}

// checkpoint is a parsed checkpoint, ready to write.
type checkpoint struct {
	dir     string
	arch    string
	md      *meta.Map
	g       *dsl.G
	tensors map[string]hfTensor
	shards  []string // file names, sorted
	cfg     hfConfig
}

func openCheckpoint(dir string) (*checkpoint, error) {
	ck := &checkpoint{dir: dir, tensors: map[string]hfTensor{}}
	b, err := readBounded(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &ck.cfg); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	ck.cfg.normalize()
	if err := ck.readShards(); err != nil {
		return nil, err
	}
	if ck.md, err = ck.metadata(); err != nil {
		return nil, err
	}
	if ck.g, err = dsl.Build(ck); err != nil {
		return nil, err
	}
	return ck, nil
}

// Meta and Has make the checkpoint the graph's Env: a GGUF tensor is
// present when its Hugging Face name is, or, for rope_freqs.weight, when
// the config's rope scaling makes one.
func (ck *checkpoint) Meta() *meta.Map { return ck.md }

func (ck *checkpoint) Has(tensor string) bool {
	if tensor == "rope_freqs.weight" {
		return ck.ropeFactors() != nil
	}
	tab, ok := tableOf(ck.arch)
	if !ok {
		return false
	}
	hf, ok := tab.HFName(tensor)
	if !ok {
		return false
	}
	_, ok = ck.tensors[hf]
	return ok
}

// tableOf is the generated table of arch's family.
func tableOf(arch string) (*dsl.Table, bool) {
	_, tab, ok := tableFor(arch)
	return tab, ok
}

// readShards parses every safetensors file of the checkpoint: the shards
// of model.safetensors.index.json, else every model*.safetensors in dir.
func (ck *checkpoint) readShards() error {
	var names []string
	index := filepath.Join(ck.dir, "model.safetensors.index.json")
	if _, err := os.Stat(index); err == nil {
		wm, err := safetensors.ReadIndex(index)
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, f := range wm {
			if !seen[f] {
				seen[f] = true
				names = append(names, f)
			}
		}
	} else {
		// model*.safetensors, as convert_hf_to_gguf.py takes (Mistral's
		// repositories also hold consolidated.safetensors, the same weights
		// under other names)
		m, err := filepath.Glob(filepath.Join(ck.dir, "model*.safetensors"))
		if err != nil {
			return err
		}
		for _, p := range m {
			names = append(names, filepath.Base(p))
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("%s holds no model*.safetensors file", ck.dir)
	}
	sort.Strings(names)
	ck.shards = names
	for _, name := range names {
		f, err := safetensors.Open(filepath.Join(ck.dir, name))
		if err != nil {
			return err
		}
		for _, t := range f.Tensors {
			if prev, dup := ck.tensors[t.Name]; dup {
				return fmt.Errorf("tensor %q is in both %s and %s", t.Name, prev.shard, name)
			}
			ck.tensors[t.Name] = hfTensor{name, t}
		}
	}
	return nil
}

// metadata is the GGUF metadata of the checkpoint, keys in
// convert_hf_to_gguf.py's order: the architecture, its hyperparameters,
// the tokenizer, the chat templates.
func (ck *checkpoint) metadata() (*meta.Map, error) {
	c := &ck.cfg
	arch := c.ModelType
	if a, ok := hfArchitectures[arch]; ok {
		arch = a
	}
	if _, ok := tableOf(arch); !ok {
		return nil, fmt.Errorf("config.json: model_type %q has no graph in this build (have %v)", c.ModelType, dsl.Architectures())
	}
	ck.arch = arch
	for _, f := range []struct {
		name string
		v    int
	}{{"hidden_size", c.HiddenSize}, {"num_hidden_layers", c.Layers}, {"num_attention_heads", c.Heads}, {"intermediate_size", c.IntermediateSize}, {"vocab_size", c.VocabSize}} {
		if f.v <= 0 || f.v > 1<<24 {
			return nil, fmt.Errorf("config.json: %s is %d", f.name, f.v)
		}
	}
	if c.Layers > len(ck.tensors) { // each block has weights: bounds the graph built from the count
		return nil, fmt.Errorf("config.json: num_hidden_layers %d, but the checkpoint holds %d tensors", c.Layers, len(ck.tensors))
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.KVHeads < 0 || c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("config.json: %d attention heads do not share %d key-value heads evenly", c.Heads, c.KVHeads)
	}
	md := &meta.Map{}
	md.Set("general.architecture", meta.Str(arch))
	md.Set("general.name", meta.Str(filepath.Base(filepath.Clean(ck.dir))))
	key := func(k string) string { return arch + "." + k }
	if c.MaxPositions > 0 {
		md.Set(key("context_length"), meta.U32(uint32(c.MaxPositions)))
	}
	md.Set(key("embedding_length"), meta.U32(uint32(c.HiddenSize)))
	md.Set(key("block_count"), meta.U32(uint32(c.Layers)))
	md.Set(key("feed_forward_length"), meta.U32(uint32(c.IntermediateSize)))
	md.Set(key("attention.head_count"), meta.U32(uint32(c.Heads)))
	md.Set(key("attention.head_count_kv"), meta.U32(uint32(c.KVHeads)))
	if c.RopeTheta > 0 {
		md.Set(key("rope.freq_base"), meta.F32(float32(c.RopeTheta)))
	}
	if c.RMSNormEps > 0 {
		md.Set(key("attention.layer_norm_rms_epsilon"), meta.F32(float32(c.RMSNormEps)))
	}
	if c.HeadDim > 0 {
		md.Set(key("attention.key_length"), meta.U32(uint32(c.HeadDim)))
		md.Set(key("attention.value_length"), meta.U32(uint32(c.HeadDim)))
	}
	if c.HeadDim > 0 || arch == "llama" {
		md.Set(key("rope.dimension_count"), meta.U32(uint32(ck.headDim())))
	}
	switch typ, _ := c.RopeScaling["rope_type"].(string); {
	case c.RopeScaling == nil, typ == "llama3", typ == "default":
	case typ == "linear":
		f, _ := c.RopeScaling["factor"].(float64)
		if f <= 0 {
			return nil, fmt.Errorf("config.json: linear rope_scaling without a positive factor")
		}
		md.Set(key("rope.scaling.type"), meta.Str("linear"))
		md.Set(key("rope.scaling.factor"), meta.F32(float32(f)))
	default:
		return nil, fmt.Errorf("config.json: rope_scaling type %q is not supported (linear and llama3 are)", typ)
	}
	md.Set(key("vocab_size"), meta.U32(uint32(c.VocabSize)))
	// the embedding's rows are the vocabulary (and bound the tokenizer's
	// padding: vocab_size is input)
	if tab, _ := tableOf(arch); tab != nil {
		if hf, ok := tab.HFName("token_embd.weight"); ok {
			if t, ok := ck.tensors[hf]; ok && (len(t.Shape) != 2 || t.Shape[0] != int64(c.VocabSize)) {
				return nil, fmt.Errorf("config.json: vocab_size %d, but %s has shape %v", c.VocabSize, hf, t.Shape)
			}
		}
	}
	if err := ck.tokenizerMeta(md); err != nil {
		return nil, err
	}
	return md, nil
}

func (ck *checkpoint) headDim() int {
	if ck.cfg.HeadDim > 0 {
		return ck.cfg.HeadDim
	}
	return ck.cfg.HiddenSize / ck.cfg.Heads
}

// tokenizerMeta adds the tokenizer (tokenizer.model or tokenizer.json,
// with tokenizer_config.json, as convert_hf_to_gguf.py reads them: the
// vocabulary padded to config.json's vocab_size) and the chat templates.
func (ck *checkpoint) tokenizerMeta(md *meta.Map) error {
	var tc []byte
	if b, err := readBounded(filepath.Join(ck.dir, "tokenizer_config.json")); err == nil {
		tc = b
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// a SentencePiece model first (Llama 2, Mistral), as
	// convert_hf_to_gguf.py tries it first; else tokenizer.json's BPE
	var tm *meta.Map
	if sp, err := readBounded(filepath.Join(ck.dir, "tokenizer.model")); err == nil {
		if tm, err = tokenizer.MetaFromSentencePiece(sp, tc, ck.cfg.VocabSize); err != nil {
			return err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	} else {
		tj, err := readBounded(filepath.Join(ck.dir, "tokenizer.json"))
		if err != nil {
			return fmt.Errorf("the checkpoint has neither tokenizer.model nor tokenizer.json: %w", err)
		}
		if tm, err = tokenizer.MetaFromHFJSON(tj, tc); err != nil {
			return err
		}
	}
	for _, kv := range tm.All() {
		v, err := kv.Value, error(nil)
		switch kv.Key {
		case "tokenizer.ggml.tokens", "tokenizer.ggml.token_type":
			if v, err = padVocab(kv.Key, v, ck.cfg.VocabSize); err != nil {
				return err
			}
		}
		md.Set(kv.Key, v)
	}
	return ck.chatTemplates(md, tc)
}

// chatTemplates adds the checkpoint's chat templates: tokenizer_config.json's
// chat_template (a string, or named templates: "default" is the template,
// the others tokenizer.chat_template.<name>), or, where newer transformers
// save it, chat_template.jinja beside it.
func (ck *checkpoint) chatTemplates(md *meta.Map, tc []byte) error {
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if tc != nil {
		if err := json.Unmarshal(tc, &cfg); err != nil {
			return fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	if len(cfg.ChatTemplate) == 0 || string(cfg.ChatTemplate) == "null" {
		b, err := readBounded(filepath.Join(ck.dir, "chat_template.jinja"))
		switch {
		case err == nil:
			md.Set("tokenizer.chat_template", meta.Str(string(b)))
		case !errors.Is(err, os.ErrNotExist):
			return err
		}
		return nil
	}
	var one string
	if json.Unmarshal(cfg.ChatTemplate, &one) == nil {
		md.Set("tokenizer.chat_template", meta.Str(one))
		return nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(cfg.ChatTemplate, &named); err != nil {
		return fmt.Errorf("tokenizer_config.json: chat_template is neither a string nor a list of named templates")
	}
	for _, t := range named {
		switch {
		case t.Name == "default":
			md.Set("tokenizer.chat_template", meta.Str(t.Template))
		case t.Name != "" && !strings.ContainsAny(t.Name, " \t\n"):
			md.Set("tokenizer.chat_template."+t.Name, meta.Str(t.Template))
		}
	}
	return nil
}

// padVocab pads the tokens (or their types) to n as convert_hf_to_gguf.py
// does: "[PAD<id>]", type unused (5).
func padVocab(key string, v meta.Value, n int) (meta.Value, error) {
	have := v.Len()
	if have > n {
		return v, fmt.Errorf("tokenizer.json has %d tokens, more than config.json's vocab_size %d", have, n)
	}
	if key == "tokenizer.ggml.tokens" {
		s, _ := v.Strings()
		for i := have; i < n; i++ {
			s = append(s, fmt.Sprintf("[PAD%d]", i))
		}
		return meta.Strs(s), nil
	}
	t, _ := v.Int32s()
	for i := have; i < n; i++ {
		t = append(t, 5)
	}
	return meta.I32s(t), nil
}

// ropeFactors is llama 3's rope_freqs.weight (rope_scaling of type
// "llama3"), as convert_hf_to_gguf.py computes it: each rotary frequency's
// divisor, 1 for short wavelengths, factor for long ones, interpolated
// between; nil without such scaling. The script works on float32 torch
// tensors, so each step here is a float32 operation too (the same bits
// where powf rounds as the float64 power does).
func (ck *checkpoint) ropeFactors() []float32 {
	rs := ck.cfg.RopeScaling
	if typ, _ := rs["rope_type"].(string); typ != "llama3" {
		return nil
	}
	num := func(k string, def float64) float32 {
		if v, ok := rs[k].(float64); ok {
			return float32(v)
		}
		return float32(def)
	}
	factor, low, high := num("factor", 8), num("low_freq_factor", 1), num("high_freq_factor", 4)
	old := num("original_max_position_embeddings", 8192)
	base := ck.cfg.RopeTheta
	if base <= 0 {
		base = 10000
	}
	dim := ck.headDim()
	lowWave, highWave := old/low, old/high
	out := make([]float32, dim/2)
	for i := range out {
		freq := 1 / float32(math.Pow(base, float64(float32(2*i)/float32(dim))))
		wave := float32(2*math.Pi) / freq
		switch {
		case wave < highWave:
			out[i] = 1
		case wave > lowWave:
			out[i] = factor
		default:
			smooth := (old/wave - low) / (high - low)
			out[i] = 1 / ((1-smooth)/factor + smooth)
		}
	}
	return out
}

// write writes the .jlm: the graph's weights in its order (matrices as
// *outType; nil: each its own), then the metadata with the provenance and
// block ranges.
func (ck *checkpoint) write(ctx context.Context, out jlm.Output, opts Options, outType *quant.Type, wrote func(int64)) error {
	w, err := jlm.NewWriter(out)
	if err != nil {
		return err
	}
	used := map[string]bool{}
	var total, done int64
	for _, wt := range ck.g.Weights {
		if t, ok := ck.tensors[wt.HF]; ok && wt.HF != "" {
			total += t.Size
		}
	}
	files := map[string]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, wt := range ck.g.Weights {
		if err := ctx.Err(); err != nil {
			return err
		}
		if wt.GGUF == "rope_freqs.weight" {
			rf := ck.ropeFactors()
			if rf == nil {
				continue
			}
			if err := writeTensor(w, wt.GGUF, quant.F32, []int64{int64(len(rf))}, f32Bytes(rf)); err != nil {
				return err
			}
			continue
		}
		t, ok := ck.tensors[wt.HF]
		if wt.HF == "" || !ok {
			if wt.Optional {
				continue
			}
			return fmt.Errorf("the checkpoint lacks %s (%s)", wt.HF, wt.GGUF)
		}
		used[wt.HF] = true
		f := files[t.shard]
		if f == nil {
			if f, err = os.Open(filepath.Join(ck.dir, t.shard)); err != nil {
				return err
			}
			files[t.shard] = f
		}
		if err := ck.convertTensor(w, f, wt, t, outType); err != nil {
			return fmt.Errorf("tensor %s (%s): %w", t.Name, wt.GGUF, err)
		}
		done += t.Size
		wrote(t.Size)
		if opts.Progress != nil {
			opts.Progress(done, total)
		}
	}
	if opts.Warn != nil {
		var unused []string
		for name := range ck.tensors {
			if !used[name] {
				unused = append(unused, name)
			}
		}
		sort.Strings(unused)
		for _, name := range unused {
			opts.Warn(fmt.Sprintf("tensor %s: no graph weight reads it; not converted", name))
		}
	}
	md := &meta.Map{}
	for _, kv := range ck.md.All() {
		md.Set(kv.Key, kv.Value)
	}
	md.Set("general.file_type", meta.U32(fileType(w.Tensors())))
	if opts.Warn != nil && slices.ContainsFunc(w.Tensors(), func(t jlm.TensorInfo) bool { return t.Type == quant.BF16 }) {
		opts.Warn("BF16 matrices kept: the CPU runner multiplies them through its generic dot, slowly (the CUDA runner has BF16 kernels); -type f16 (Options.MatrixType) writes them as F16")
	}
	if err := ck.provenance(md); err != nil {
		return err
	}
	blocks, warnings := blockLayout(ck.arch, w.Tensors())
	for _, kv := range blocks.All() {
		md.Set(kv.Key, kv.Value)
	}
	if opts.Warn != nil {
		for _, s := range warnings {
			opts.Warn(s)
		}
	}
	return w.Finish(md)
}

// fileType is llama.cpp's general.file_type of the matrices' float type
// (the one most of them have): all F32 0, F16 1, BF16 32.
func fileType(ts []jlm.TensorInfo) uint32 {
	count := map[quant.Type]int{}
	for _, t := range ts {
		if len(t.Dims) == 2 {
			count[t.Type]++
		}
	}
	switch {
	case count[quant.BF16] > count[quant.F16] && count[quant.BF16] > count[quant.F32]:
		return 32
	case count[quant.F16] > count[quant.F32]:
		return 1
	}
	return 0
}

// matrixType is Options.MatrixType's type, nil for "" (each matrix's own).
func matrixType(name string) (*quant.Type, error) {
	if name == "" {
		return nil, nil
	}
	t, ok := map[string]quant.Type{"f32": quant.F32, "f16": quant.F16, "bf16": quant.BF16}[name]
	if !ok {
		return nil, fmt.Errorf("matrix type %q: want f32, f16 or bf16", name)
	}
	return &t, nil
}

// convertTensor writes one weight: a matrix as *out (nil: its own float
// type), a vector as F32; q and k rows permuted where the graph says.
func (ck *checkpoint) convertTensor(w *jlm.Writer, f *os.File, wt *dsl.Weight, t hfTensor, out *quant.Type) error {
	dims := make([]int64, len(t.Shape)) // ggml order: the torch shape reversed
	for i, d := range t.Shape {
		dims[len(t.Shape)-1-i] = d
	}
	if !equalDims(dims, wt.Dims) {
		return fmt.Errorf("shape %v, the graph expects %v (ggml order)", t.Shape, wt.Dims)
	}
	var typ quant.Type
	switch t.DType {
	case "F32":
		typ = quant.F32
	case "F16":
		typ = quant.F16
	case "BF16":
		typ = quant.BF16
	default:
		return fmt.Errorf("dtype %s is not supported (F32, F16 and BF16 are)", t.DType)
	}
	b := make([]byte, t.Size) // the tensor's own bytes: bounded by its file
	if _, err := f.ReadAt(b, t.Offset); err != nil {
		return fmt.Errorf("reading %d bytes at %d: %w", t.Size, t.Offset, err)
	}
	to := typ
	switch {
	case len(dims) == 1:
		to = quant.F32
	case out != nil:
		to = *out
	}
	if to != typ {
		var err error
		if b, err = convertFloats(b, typ, to); err != nil {
			return err
		}
		typ = to
	}
	if wt.Transform == dsl.RopePermute {
		var err error
		if b, err = ropePermute(b, dims, wt.TransformN); err != nil {
			return err
		}
	}
	return writeTensor(w, wt.GGUF, typ, dims, b)
}

// ropePermute reorders a q or k projection's rows from Hugging Face's
// rotary layout (each head's first half of rows, then its second) to
// GGUF llama's (the halves' rows interleaved): GGUF row h·hd + 2i + j is
// HF row h·hd + j·hd/2 + i.
func ropePermute(b []byte, dims []int64, heads int) ([]byte, error) {
	if len(dims) != 2 || heads <= 0 || dims[1]%int64(2*heads) != 0 {
		return nil, fmt.Errorf("rotary permutation of %v over %d heads", dims, heads)
	}
	rowBytes := int(int64(len(b)) / dims[1])
	hd := int(dims[1]) / heads
	out := make([]byte, len(b))
	for h := range heads {
		for i := range hd / 2 {
			for j := range 2 {
				dst, src := h*hd+2*i+j, h*hd+j*hd/2+i
				copy(out[dst*rowBytes:(dst+1)*rowBytes], b[src*rowBytes:(src+1)*rowBytes])
			}
		}
	}
	return out, nil
}

// provenance adds the jlm.* keys of a checkpoint: its directory's name,
// the shards' total size and the CRC-32C of their bytes one after another
// in name order (a second read of the shards: the tensors are read in the
// graph's order, not the files').
func (ck *checkpoint) provenance(md *meta.Map) error {
	crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	var size int64
	for _, name := range ck.shards {
		f, err := os.Open(filepath.Join(ck.dir, name))
		if err != nil {
			return err
		}
		n, err := io.Copy(crc, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("reading %s: %w", name, err)
		}
		size += n
	}
	sourceKeys(md, "safetensors", 0, ck.dir, size, crc.Sum32(), "")
	return nil
}

// convertFloats rewrites float values of type from as type to: widened
// exactly, or narrowed to nearest even as numpy's astype (F16: values
// past its range become infinities, as they do in convert_hf_to_gguf.py)
// and torch's bfloat16 (ggml's rounding).
func convertFloats(b []byte, from, to quant.Type) ([]byte, error) {
	n := len(b) / 4
	if from != quant.F32 {
		n = len(b) / 2
	}
	v := make([]float32, n)
	if err := quant.Dequantize(from, b, v); err != nil {
		return nil, err
	}
	switch to {
	case quant.F32:
		return f32Bytes(v), nil
	case quant.F16, quant.BF16:
		out := make([]byte, 2*n)
		for i, x := range v {
			h := quant.F32ToBF16(x)
			if to == quant.F16 {
				h = quant.F32ToF16(x)
			}
			binary.LittleEndian.PutUint16(out[2*i:], h)
		}
		return out, nil
	}
	return nil, fmt.Errorf("no conversion to %v", to)
}

func writeTensor(w *jlm.Writer, name string, typ quant.Type, dims []int64, b []byte) error {
	tw, err := w.Create(name, typ, dims)
	if err != nil {
		return err
	}
	if _, err := tw.Write(b); err != nil {
		return err
	}
	return tw.Close()
}

func equalDims(a, b []int64) bool { return slices.Equal(a, b) }

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// readBounded reads a checkpoint's JSON file, refusing one past
// maxJSONFile.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxJSONFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(b) > maxJSONFile {
		return nil, fmt.Errorf("%s is over %d MiB", path, maxJSONFile>>20)
	}
	return b, nil
}
