// Package cpugen is the Go rendering of every kernel in kernels/ops: plain,
// allocation-free functions that agree bit for bit with the dsl/kernel
// interpreter. Everything but this file and the tests is generated.
//
// Parallel loops run serially: to split a MatVec over goroutines, slice w
// and y by rows.
package cpugen

//go:generate go run ../../gen/kernels -out .
