package capabilities

import (
	"sort"
	"sync"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/quant"
)

// Descriptor is what a backend package declares about itself, from an init:
//
//	func init() { capabilities.RegisterBackend(capabilities.Descriptor{Name: "cuda", ...}) }
//
// gen/capabilities imports every package that registers one and tabulates
// them; the running binary never consults descriptors, only the generated
// table, so what the docs say and what doctor checks are the same thing.
type Descriptor struct {
	Name    string // "cpu", "cuda", ...
	Device  string // the device kind it runs on: cpu, cuda, vulkan, metal
	Package string // import path of the implementation; its source files give the ISA variants

	Decode func(quant.Type) bool // weights of the type can be read
	MatMul func(quant.Type) bool // a matmul over weights of the type has a kernel

	// Plan plans g (a traced graph, its weights zero) as the backend would
	// before running it; nil means the backend can run the graph.
	Plan func(g *dsl.G) error

	// Variants lists the ISA code paths; nil lets the generator derive them
	// from Package's source files for each first-class GOARCH.
	Variants []Variant
}

// Server packages declare each endpoint they serve, with the request fields
// it honours and those it rejects, through RegisterEndpoint:
//
//	func init() { capabilities.RegisterEndpoint(capabilities.Endpoint{Method: "POST", Path: "/v1/chat/completions", Accepts: ..., Refuses: ...}) }

var (
	mu          sync.Mutex
	descriptors = map[string]Descriptor{}
	endpoints   = map[string]Endpoint{}
)

// RegisterBackend adds a backend's descriptor (for gen/capabilities).
func RegisterBackend(d Descriptor) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := descriptors[d.Name]; dup {
		panic("capabilities: backend " + d.Name + " registered twice")
	}
	descriptors[d.Name] = d
}

// RegisterEndpoint adds an HTTP endpoint (for gen/capabilities).
func RegisterEndpoint(e Endpoint) {
	mu.Lock()
	defer mu.Unlock()
	k := e.Method + " " + e.Path
	if _, dup := endpoints[k]; dup {
		panic("capabilities: endpoint " + k + " registered twice")
	}
	endpoints[k] = e
}

// Registered returns the registered descriptors sorted by name and the
// endpoints sorted by path and method.
func Registered() ([]Descriptor, []Endpoint) {
	mu.Lock()
	defer mu.Unlock()
	ds := make([]Descriptor, 0, len(descriptors))
	for _, d := range descriptors {
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].Name < ds[j].Name })
	es := make([]Endpoint, 0, len(endpoints))
	for _, e := range endpoints {
		es = append(es, e)
	}
	sort.Slice(es, func(i, j int) bool {
		if es[i].Path != es[j].Path {
			return es[i].Path < es[j].Path
		}
		return es[i].Method < es[j].Method
	})
	return ds, es
}
