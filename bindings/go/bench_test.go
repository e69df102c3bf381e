package pacer_test

import (
	"testing"

	pacer "github.com/connpacer/pacer/bindings/go"
)

// BenchmarkReserve: one goroutine, the clock advancing 1 s per call so
// every reservation is admitted at once (one cgo call each).
func BenchmarkReserve(b *testing.B) {
	p := mustNew(b, pacer.DefaultConfig())
	now := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		now += 1000
		if _, err := p.Reserve(now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReserveParallel: every goroutine on one pacer at one instant
// (after the first 14, refusals).
func BenchmarkReserveParallel(b *testing.B) {
	p := mustNew(b, pacer.DefaultConfig())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := p.Reserve(0); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
