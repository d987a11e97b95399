// Package weights gives one read-only view of a model file, whichever
// container holds it (GGUF or .jlm), so loaders and the CLI need not care.
package weights

import (
	"fmt"
	"io"
	"os"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/gguf"
	"github.com/jitllm/jitllm/runtime/meta"
)

// Tensor describes one stored tensor.
type Tensor struct {
	Name string
	Type quant.Type
	Dims []int64 // ggml order: Dims[0] is the row length
	Size int64   // bytes
}

// Elements is the number of values in the tensor.
func (t Tensor) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Source is an opened model file.
type Source interface {
	// Format is "gguf" or "jlm".
	Format() string
	Meta() *meta.Map
	Tensors() []Tensor
	Tensor(name string) (Tensor, bool)
	// Data returns a tensor's bytes; it may be a view of a read-only mapping.
	Data(name string) ([]byte, error)
	Close() error
}

// Opener opens a container whose file starts with its magic.
type Opener func(path string) (Source, error)

var openers = map[string]Opener{"GGUF": openGGUF}

// Register adds a container format by its 4-byte magic (called from init of
// the format's adapter, e.g. the .jlm one).
func Register(magic string, o Opener) { openers[magic] = o }

// Open opens path, choosing the container by its first four bytes.
func Open(path string) (Source, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: too short to be a model file", path)
	}
	o, ok := openers[string(magic[:])]
	if !ok {
		return nil, fmt.Errorf("%s: not a GGUF or .jlm file (starts with %q)", path, magic[:])
	}
	return o(path)
}

type ggufSource struct{ f *gguf.File }

func openGGUF(path string) (Source, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	return ggufSource{f}, nil
}

func (g ggufSource) Format() string   { return "gguf" }
func (g ggufSource) Meta() *meta.Map  { return g.f.Meta }
func (g ggufSource) Close() error     { return g.f.Close() }
func (g ggufSource) File() *gguf.File { return g.f }

func (g ggufSource) Tensors() []Tensor {
	out := make([]Tensor, len(g.f.Tensors))
	for i, t := range g.f.Tensors {
		out[i] = Tensor{Name: t.Name, Type: t.Type, Dims: t.Dims, Size: t.Size}
	}
	return out
}

func (g ggufSource) Tensor(name string) (Tensor, bool) {
	t, ok := g.f.Tensor(name)
	if !ok {
		return Tensor{}, false
	}
	return Tensor{Name: t.Name, Type: t.Type, Dims: t.Dims, Size: t.Size}, true
}

func (g ggufSource) Data(name string) ([]byte, error) {
	t, ok := g.f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("no tensor %q", name)
	}
	return g.f.Data(t)
}
