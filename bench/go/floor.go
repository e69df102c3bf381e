// Package pacerbench measures the Go binding's hot calls side by side
// with golang.org/x/time/rate, the limiter Go users would pick instead.
// The benchmarks are in bench_test.go; run.sh runs them and writes the
// results. This file holds what a _test.go file cannot: a cgo call.
package pacerbench

/*
// The crossing floor: a C function that does nothing. It carries the same
// nocallback annotation as the binding's hot call (pacer_reserve), so
// the floor is what that call pays to cross at least.
#cgo nocallback pacerbench_noop
static void pacerbench_noop(void) {}
*/
import "C"

// Noop calls an empty C function: the least any cgo call costs.
func Noop() { C.pacerbench_noop() }
