// Package jitllm is the root of the module. Its only job is to carry the
// go:generate lines: `go generate ./...` from the root rebuilds every
// generated file (graph tables, converter tables, capabilities).
package jitllm
