package synth

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jitllm/jitllm/kernels/quant"
)

// FileType is a llama-quantize target (llama_ftype): the default type of the
// 2D weights, refined per tensor by TensorType.
type FileType uint32

// The file types synth writes; the values are llama.cpp's general.file_type.
const (
	F16    FileType = 1
	Q4_0   FileType = 2
	Q8_0   FileType = 7
	Q4_K_M FileType = 15
)

var fileTypes = []struct {
	ft   FileType
	flag string // the --type spelling
	name string // llama_model_ftype_name
	base quant.Type
}{
	{F16, "f16", "F16", quant.F16},
	{Q4_0, "q4_0", "Q4_0", quant.Q4_0},
	{Q8_0, "q8_0", "Q8_0", quant.Q8_0},
	{Q4_K_M, "q4_k_m", "Q4_K - Medium", quant.Q4_K},
}

// ParseFileType reads a --type value: f16, q4_0, q8_0 or q4_k_m (any case).
func ParseFileType(s string) (FileType, error) {
	var names []string
	for _, f := range fileTypes {
		if strings.EqualFold(s, f.flag) {
			return f.ft, nil
		}
		names = append(names, f.flag)
	}
	return 0, fmt.Errorf("unknown type %q (have %s)", s, strings.Join(names, ", "))
}

// String is llama.cpp's name for the file type ("Q4_K - Medium").
func (ft FileType) String() string {
	for _, f := range fileTypes {
		if f.ft == ft {
			return f.name
		}
	}
	return "ftype " + strconv.Itoa(int(ft))
}

// Base is the type of the 2D weights before the per-tensor refinements.
func (ft FileType) Base() quant.Type {
	for _, f := range fileTypes {
		if f.ft == ft {
			return f.base
		}
	}
	return quant.F16
}

// useMoreBits is llama.cpp's use_more_bits(i_layer, n_layers): the first and
// last eighth of the layers and every third one between them (integer
// division throughout, as in C).
func useMoreBits(i, n int) bool {
	return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2
}

// TensorType is the type llama-quantize (llama_tensor_get_type, no imatrix,
// no overrides) gives the tensor name, of row length ne0 and dims
// dimensions, in a model of nLayer blocks, for ft. hasOutput says whether
// the model has its own output.weight (false: tied to token_embd). The rules
// that apply to the file types synth writes, checked against llama-quantize's
// output in testdata/anchors/*.mix.txt:
//
//   - 1D tensors (norms) stay F32; F16 writes every 2D weight as F16.
//   - The output projection (output.weight, or token_embd.weight when tied)
//     gets Q6_K unless the base type is Q8_0 (which it keeps); a row length
//     that is not a whole number of the base type's blocks gives Q8_0.
//   - An untied token_embd.weight keeps the base type.
//   - Q4_K_M: attn_v and ffn_down of layer i get Q6_K when
//     useMoreBits(i, nLayer) — i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2;
//     for 16 layers that is 0, 1, 4, 7, 10, 13, 14, 15; for 32 layers 0–3, 6,
//     9, …, 27, 28–31. Everything else is Q4_K.
//   - A row length that is not a whole number of the chosen type's blocks
//     falls back as llama.cpp does (Q4_K → Q5_0, Q6_K → Q8_0), then to F16
//     (where llama.cpp would refuse a legacy type; no preset has such rows).
func TensorType(ft FileType, name string, ne0 int64, dims int, nLayer int, hasOutput bool) quant.Type {
	if dims < 2 {
		return quant.F32
	}
	base := ft.Base()
	if base == quant.F16 {
		return quant.F16
	}
	t := base
	layer := layerOf(name)
	switch {
	case name == "output.weight" || (!hasOutput && name == "token_embd.weight"):
		if ne0%blockSize(base) != 0 {
			t = quant.Q8_0
		} else if base != quant.Q8_0 {
			t = quant.Q6_K
		}
	case strings.HasSuffix(name, ".attn_v.weight") || strings.HasSuffix(name, ".ffn_down.weight"):
		if ft == Q4_K_M && layer >= 0 && useMoreBits(layer, nLayer) {
			t = quant.Q6_K
		}
	}
	if ne0%blockSize(t) != 0 {
		switch t {
		case quant.Q4_K:
			t = quant.Q5_0
		case quant.Q6_K:
			t = quant.Q8_0
		}
		if ne0%blockSize(t) != 0 {
			t = quant.F16
		}
	}
	return t
}

// layerOf parses i from "blk.i.…", or returns -1.
func layerOf(name string) int {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1
	}
	num, _, ok := strings.Cut(rest, ".")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(num)
	if err != nil {
		return -1
	}
	return i
}

func blockSize(t quant.Type) int64 {
	l, ok := quant.LayoutOf(t)
	if !ok {
		return 1
	}
	return int64(l.BlockSize)
}
