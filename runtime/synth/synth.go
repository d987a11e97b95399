package synth

import (
	"bufio"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/gguf"
	"github.com/jitllm/jitllm/runtime/meta"
)

// Weight statistics: matrices are N(0, Std²); norm weights are 1 + N(0, NormStd²).
const (
	Std     = 0.02
	NormStd = 0.02
)

// Options shape a synthetic model.
type Options struct {
	Shape  Shape
	Type   FileType
	Seed   uint64
	Layers int // when > 0, keep only this many blocks (tests, quick runs)
	// Threads quantize in parallel; 0 = GOMAXPROCS.
	Threads int
	// Progress, when set, is called after each tensor with the bytes of
	// tensor data written so far and the total.
	Progress func(done, total int64)
}

// Tensor is one planned tensor.
type Tensor struct {
	Name string
	Type quant.Type
	Dims []int64 // ggml order: Dims[0] is the row length
	Norm bool    // a norm weight (≈1) rather than a matrix (≈0)
}

// Elements is the number of values.
func (t *Tensor) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Size is the byte size.
func (t *Tensor) Size() int64 {
	row, _ := quant.RowBytes(t.Type, t.Dims[0])
	n := row
	for _, d := range t.Dims[1:] {
		n *= d
	}
	return n
}

// shape is the effective shape after the Layers override.
func (o *Options) shape() (Shape, error) {
	s := o.Shape
	if o.Layers > 0 {
		s.Layers = o.Layers
	}
	if err := s.validate(); err != nil {
		return s, err
	}
	if o.Type.Base() == quant.F16 && o.Type != F16 {
		return s, fmt.Errorf("unsupported file type %d", uint32(o.Type))
	}
	return s, nil
}

// Plan lists the tensors of the model in file order with the type each gets.
func Plan(o Options) ([]Tensor, error) {
	s, err := o.shape()
	if err != nil {
		return nil, err
	}
	e, v, q, kv, ff := int64(s.Embd), int64(s.Vocab), int64(s.Heads*s.HeadDim), int64(s.KVHeads*s.HeadDim), int64(s.FF)
	var ts []Tensor
	add := func(name string, dims ...int64) {
		ts = append(ts, Tensor{
			Name: name, Dims: dims, Norm: len(dims) == 1,
			Type: TensorType(o.Type, name, dims[0], len(dims), s.Layers, !s.Tied),
		})
	}
	// The order of the anchors' files (testdata/anchors/*.mix.txt): output,
	// output_norm, token_embd, then each block's tensors by name.
	if !s.Tied {
		add("output.weight", e, v)
	}
	add("output_norm.weight", e)
	add("token_embd.weight", e, v)
	for i := 0; i < s.Layers; i++ {
		p := "blk." + strconv.Itoa(i) + "."
		add(p+"attn_k.weight", e, kv)
		if s.QKNorm {
			add(p+"attn_k_norm.weight", int64(s.HeadDim))
		}
		add(p+"attn_norm.weight", e)
		add(p+"attn_output.weight", q, e)
		add(p+"attn_q.weight", e, q)
		if s.QKNorm {
			add(p+"attn_q_norm.weight", int64(s.HeadDim))
		}
		add(p+"attn_v.weight", e, kv)
		add(p+"ffn_down.weight", ff, e)
		add(p+"ffn_gate.weight", e, ff)
		add(p+"ffn_norm.weight", e)
		add(p+"ffn_up.weight", e, ff)
	}
	return ts, nil
}

// Metadata is the GGUF metadata of the model: general.*, the architecture's
// hyperparameters under its prefix, and a SentencePiece-style ("llama")
// vocabulary of dummy tokens: <unk> 0, <s> 1, </s> 2, the 256 byte tokens
// <0x00>…<0xFF>, then "▁t<n>" pieces with decreasing scores.
func Metadata(o Options) (*meta.Map, error) {
	s, err := o.shape()
	if err != nil {
		return nil, err
	}
	md := &meta.Map{}
	a := s.Arch + "."
	name := s.Name
	if name == "" {
		name = s.Arch
	}
	md.Set("general.architecture", meta.Str(s.Arch))
	md.Set("general.type", meta.Str("model"))
	md.Set("general.name", meta.Str("synthetic "+name))
	if s.SizeLabel != "" {
		md.Set("general.size_label", meta.Str(s.SizeLabel))
	}
	md.Set("general.file_type", meta.U32(uint32(o.Type)))
	if o.Type != F16 {
		md.Set("general.quantization_version", meta.U32(2))
	}
	md.Set("general.alignment", meta.U32(gguf.DefaultAlignment))
	md.Set("synth.seed", meta.U64(o.Seed))
	md.Set(a+"context_length", meta.U32(uint32(s.Context)))
	md.Set(a+"embedding_length", meta.U32(uint32(s.Embd)))
	md.Set(a+"block_count", meta.U32(uint32(s.Layers)))
	md.Set(a+"feed_forward_length", meta.U32(uint32(s.FF)))
	md.Set(a+"attention.head_count", meta.U32(uint32(s.Heads)))
	md.Set(a+"attention.head_count_kv", meta.U32(uint32(s.KVHeads)))
	md.Set(a+"attention.key_length", meta.U32(uint32(s.HeadDim)))
	md.Set(a+"attention.value_length", meta.U32(uint32(s.HeadDim)))
	md.Set(a+"attention.layer_norm_rms_epsilon", meta.F32(s.Eps))
	md.Set(a+"rope.dimension_count", meta.U32(uint32(s.HeadDim)))
	md.Set(a+"rope.freq_base", meta.F32(s.RopeBase))
	md.Set(a+"vocab_size", meta.U32(uint32(s.Vocab)))

	toks := make([]string, s.Vocab)
	scores := make([]float32, s.Vocab)
	types := make([]int32, s.Vocab)
	const (
		normal  = 1
		unknown = 2
		control = 3
		byteTok = 6
	)
	for i := range toks {
		switch {
		case i == 0:
			toks[i], types[i] = "<unk>", unknown
		case i == 1:
			toks[i], types[i] = "<s>", control
		case i == 2:
			toks[i], types[i] = "</s>", control
		case i < 3+256:
			toks[i], types[i] = fmt.Sprintf("<0x%02X>", i-3), byteTok
		default:
			toks[i], types[i] = "▁t"+strconv.Itoa(i), normal
			scores[i] = -float32(i - (3 + 256))
		}
	}
	md.Set("tokenizer.ggml.model", meta.Str("llama"))
	md.Set("tokenizer.ggml.tokens", meta.Strs(toks))
	md.Set("tokenizer.ggml.scores", meta.F32s(scores))
	md.Set("tokenizer.ggml.token_type", meta.I32s(types))
	md.Set("tokenizer.ggml.unknown_token_id", meta.U32(0))
	md.Set("tokenizer.ggml.bos_token_id", meta.U32(1))
	md.Set("tokenizer.ggml.eos_token_id", meta.U32(2))
	md.Set("tokenizer.ggml.add_bos_token", meta.B(true))
	md.Set("tokenizer.ggml.add_eos_token", meta.B(false))
	return md, nil
}

// Summary describes a written file.
type Summary struct {
	Path    string
	Tensors int
	Params  int64 // tensor elements
	Bytes   int64 // tensor data bytes
}

// Write writes the model to path: to a temporary file beside it, renamed
// into place when complete (an existing file is replaced). Tensors are
// generated and quantized a block of rows at a time by Threads workers and
// streamed in order, so memory stays a few tens of MiB (the vocabulary's
// metadata, a few chunks) whatever the model's size;
// the bytes depend only on the options (not on Threads or timing).
func Write(ctx context.Context, path string, o Options) (sum Summary, err error) {
	ts, err := Plan(o)
	if err != nil {
		return sum, err
	}
	md, err := Metadata(o)
	if err != nil {
		return sum, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return sum, fmt.Errorf("creating the output: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err = WriteTo(ctx, bw, md, ts, o); err != nil {
		return sum, err
	}
	if err = bw.Flush(); err != nil {
		return sum, err
	}
	if err = tmp.Chmod(0o644); err != nil { // CreateTemp makes it 0600
		return sum, err
	}
	if err = tmp.Sync(); err != nil {
		return sum, err
	}
	if err = tmp.Close(); err != nil {
		return sum, err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return sum, fmt.Errorf("moving the output into place: %w", err)
	}
	sum = Summary{Path: path, Tensors: len(ts)}
	for i := range ts {
		sum.Params += ts[i].Elements()
		sum.Bytes += ts[i].Size()
	}
	return sum, nil
}

// chunkElems is the target size of one unit of work (a block of rows).
const chunkElems = 1 << 18

// chunk is one block of rows of one tensor, generated and encoded by a
// worker, written by the writer in order.
type chunk struct {
	t          *Tensor
	key        uint64 // the tensor's RNG stream
	idx        int    // chunk number within the tensor
	row0, rows int64
	out        []byte
	err        error
	done       chan struct{}
}

// WriteTo streams the GGUF of md and ts to w (see Write).
func WriteTo(ctx context.Context, w io.Writer, md *meta.Map, ts []Tensor, o Options) error {
	workers := o.Threads
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	queue := make(chan *chunk, 4*workers) // in order, bounds the chunks in flight
	jobs := make(chan *chunk, 4*workers)
	var pool sync.Pool

	// Producer: every chunk of every tensor, in file order, so workers
	// never idle at a tensor boundary.
	go func() {
		defer close(queue)
		defer close(jobs)
		for i := range ts {
			t := &ts[i]
			h := fnv.New64a()
			h.Write([]byte(t.Name))
			rows := t.Elements() / t.Dims[0]
			per := max(1, chunkElems/t.Dims[0])
			for k, r0 := 0, int64(0); r0 < rows; k, r0 = k+1, r0+per {
				c := &chunk{t: t, key: h.Sum64(), idx: k, row0: r0, rows: min(per, rows-r0), done: make(chan struct{})}
				select {
				case queue <- c:
				case <-ctx.Done():
					return
				}
				select {
				case jobs <- c:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var src []float32
			for c := range jobs {
				n := int(c.rows * c.t.Dims[0])
				if cap(src) < n {
					src = make([]float32, n)
				}
				src = src[:n]
				fill(src, o.Seed, c)
				size := int(c.rows) * quant.RowSize(c.t.Type, int(c.t.Dims[0]))
				if b, _ := pool.Get().(*[]byte); b != nil && cap(*b) >= size {
					c.out = (*b)[:size]
				} else {
					c.out = make([]byte, size)
				}
				c.err = quant.Quantize(c.t.Type, src, c.out)
				close(c.done)
			}
		}()
	}
	defer wg.Wait()
	defer cancel() // runs before wg.Wait: stops the producer, so jobs closes

	var total, done int64
	for i := range ts {
		total += ts[i].Size()
	}
	wts := make([]gguf.WriteTensor, len(ts))
	for i := range ts {
		t := &ts[i]
		wts[i] = gguf.WriteTensor{Name: t.Name, Type: t.Type, Dims: t.Dims, Data: func(w io.Writer) error {
			rows := t.Elements() / t.Dims[0]
			for got := int64(0); got < rows; {
				var c *chunk
				select {
				case c = <-queue:
				case <-ctx.Done():
					return ctx.Err()
				}
				if c == nil || c.t != t {
					return fmt.Errorf("synth: chunk stream out of order at %s", t.Name)
				}
				select {
				case <-c.done:
				case <-ctx.Done():
					return ctx.Err()
				}
				if c.err != nil {
					return c.err
				}
				if _, err := w.Write(c.out); err != nil {
					return err
				}
				b := c.out
				pool.Put(&b)
				got += c.rows
			}
			done += t.Size()
			if o.Progress != nil {
				o.Progress(done, total)
			}
			return nil
		}}
	}
	return gguf.Write(w, md, wts)
}

// fill writes c's values: each chunk has its own PCG stream keyed by the
// seed, the tensor's name and the chunk number, so any worker can make any
// chunk and the file is the same.
func fill(dst []float32, seed uint64, c *chunk) {
	r := rand.New(rand.NewPCG(seed, c.key^(uint64(c.idx)*0x9e3779b97f4a7c15)))
	if c.t.Norm {
		for i := range dst {
			dst[i] = float32(1 + NormStd*r.NormFloat64())
		}
		return
	}
	for i := range dst {
		dst[i] = float32(Std * r.NormFloat64())
	}
}
