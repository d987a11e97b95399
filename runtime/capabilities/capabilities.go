// Package capabilities is what this build of jitllm can do, as gen/capabilities
// found it in the code: the model families and their architectures, each
// backend with the quant types its kernels cover and the ISA variants compiled
// in, and the API endpoints with the request fields each accepts or refuses.
// The table itself is zz_capabilities.go; nothing in it is written by hand.
// `jitllm capabilities`, GET /v1/capabilities and docs/capabilities.md all
// render the same Table.
package capabilities

import (
	"encoding/json"
	"sort"
)

//go:generate go run -tags jitllm_gen ../../gen/capabilities -out zz_capabilities.go -doc ../../docs/capabilities.md

// Schema is the version of the JSON shape; it changes only when a field is
// removed or changes meaning.
const Schema = 1

// Table is the whole capabilities report.
type Table struct {
	Schema    int        `json:"schema"`
	Ops       []string   `json:"ops"`      // the DSL's op set
	Families  []Family   `json:"families"` // model families with a graph
	Backends  []Backend  `json:"backends"` // backends compiled in
	Endpoints []Endpoint `json:"endpoints"`
	// EndpointsNote says where the endpoint list comes from (and why it may be empty).
	EndpointsNote string `json:"endpoints_note,omitempty"`
}

// Family is one model family, traced from its Build function.
type Family struct {
	Name          string   `json:"name"`
	Architectures []string `json:"architectures"` // general.architecture values it serves
	Models        string   `json:"models"`
	Ops           []string `json:"ops"`             // ops its graph uses
	Hyper         []string `json:"hyperparameters"` // metadata keys it reads (without the arch prefix)
	Backends      []string `json:"backends"`        // backends that planned its traced graph
}

// Backend is one compiled-in backend.
type Backend struct {
	Name     string      `json:"name"`
	Device   string      `json:"device"`  // the device kind it runs on: cpu, cuda, vulkan, metal
	Package  string      `json:"package"` // the Go package that implements it
	Ops      []string    `json:"ops"`     // ops it lowered in a real plan of every family
	Quant    []QuantType `json:"quant_types"`
	Variants []Variant   `json:"variants"`
}

// QuantType is one ggml type and what a backend does with it.
type QuantType struct {
	Type string `json:"type"`
	// Decode: weights of this type can be read (embedding rows, norm scales).
	Decode bool `json:"decode"`
	// MatMul: a matmul over weights of this type has a kernel.
	MatMul bool `json:"matmul"`
}

// Variant is one ISA code path compiled into a backend.
type Variant struct {
	GOARCH string `json:"goarch"`
	// Kind is "go" (portable Go), "asm" (assembly) or "ptx" (GPU code rendered at run time).
	Kind string `json:"kind"`
	// Features are the CPU features the variant needs at run time (none for "go").
	Features []string `json:"features,omitempty"`
	// ISAs are the instruction-set levels an "asm" variant's kernels are
	// built for (avx2, avxvnni, avx512, avx512vnni), read from its assembly;
	// each kernel registers only where the CPU has its level, the best first.
	ISAs []string `json:"isas,omitempty"`
	// Files are the source files of an asm variant.
	Files []string `json:"files,omitempty"`
}

// Endpoint is one HTTP route the server registers.
type Endpoint struct {
	Method  string   `json:"method"`
	Path    string   `json:"path"`
	Accepts []string `json:"accepts,omitempty"` // request fields honoured
	Refuses []string `json:"refuses,omitempty"` // request fields rejected with an error
}

// Get returns the table of this build. Lists are never nil, so the JSON
// shape is the same whatever the build holds.
func Get() Table {
	t := generated
	if t.Endpoints == nil {
		t.Endpoints = []Endpoint{}
	}
	fams := make([]Family, len(t.Families))
	for i, f := range t.Families {
		if f.Backends == nil {
			f.Backends = []string{}
		}
		fams[i] = f
	}
	t.Families = fams
	return t
}

// JSON is the table as indented JSON, what GET /v1/capabilities serves and
// `jitllm capabilities -json` prints.
func JSON() []byte {
	b, err := json.MarshalIndent(Get(), "", "  ")
	if err != nil {
		panic(err) // a Table of plain fields always marshals
	}
	return append(b, '\n')
}

// Backend finds a backend by name.
func (t Table) Backend(name string) (Backend, bool) {
	for _, b := range t.Backends {
		if b.Name == name {
			return b, true
		}
	}
	return Backend{}, false
}

// ForDevice lists the backends that run on a device kind.
func (t Table) ForDevice(kind string) []Backend {
	var out []Backend
	for _, b := range t.Backends {
		if b.Device == kind {
			out = append(out, b)
		}
	}
	return out
}

// Architectures lists every architecture with a graph, sorted.
func (t Table) Architectures() []string {
	var out []string
	for _, f := range t.Families {
		out = append(out, f.Architectures...)
	}
	sort.Strings(out)
	return out
}

// Family finds the family serving an architecture.
func (t Table) Family(arch string) (Family, bool) {
	for _, f := range t.Families {
		for _, a := range f.Architectures {
			if a == arch {
				return f, true
			}
		}
	}
	return Family{}, false
}

// Quant finds what the backend does with a type (by name, e.g. "Q4_K").
func (b Backend) QuantType(name string) (QuantType, bool) {
	for _, q := range b.Quant {
		if q.Type == name {
			return q, true
		}
	}
	return QuantType{}, false
}
