package weights

import (
	"fmt"

	"github.com/jitllm/jitllm/runtime/jlm"
	"github.com/jitllm/jitllm/runtime/meta"
)

// The .jlm adapter registers itself so Open sniffs "JLM1" like "GGUF".
func init() { Register(jlm.Magic, openJLM) }

type jlmSource struct{ f *jlm.File }

func openJLM(path string) (Source, error) {
	f, err := jlm.Open(path)
	if err != nil {
		return nil, err
	}
	return jlmSource{f}, nil
}

func (s jlmSource) Format() string  { return "jlm" }
func (s jlmSource) Meta() *meta.Map { return s.f.Meta }
func (s jlmSource) Close() error    { return s.f.Close() }

// File gives callers that need checksums or expert ranges the .jlm file.
func (s jlmSource) File() *jlm.File { return s.f }

func (s jlmSource) Tensors() []Tensor {
	out := make([]Tensor, len(s.f.Tensors))
	for i, t := range s.f.Tensors {
		out[i] = Tensor{Name: t.Name, Type: t.Type, Dims: t.Dims, Size: t.Size}
	}
	return out
}

func (s jlmSource) Tensor(name string) (Tensor, bool) {
	t, ok := s.f.Tensor(name)
	if !ok {
		return Tensor{}, false
	}
	return Tensor{Name: t.Name, Type: t.Type, Dims: t.Dims, Size: t.Size}, true
}

func (s jlmSource) Data(name string) ([]byte, error) {
	t, ok := s.f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", s.f.Path, name)
	}
	return s.f.Data(t), nil
}
