package main

// Every package that registers a backend descriptor or an HTTP endpoint with
// runtime/capabilities is imported here for its init. The generator parses
// this file and fails when a package of the module calls
// capabilities.RegisterBackend or capabilities.RegisterEndpoint but is not
// imported, so a new backend or route cannot be left out of the table.
import (
	_ "github.com/jitllm/jitllm/graphs"          // every model family
	_ "github.com/jitllm/jitllm/runtime/gpuexec" // the CUDA backend
	_ "github.com/jitllm/jitllm/server"          // the HTTP API's endpoints
)
