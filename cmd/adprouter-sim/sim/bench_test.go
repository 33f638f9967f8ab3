package sim

import "testing"

// BenchmarkStep measures one engine iteration (routing, scheduling, cache
// updates) of a loaded 8-rank engine under the shared-prompt workload with
// the KV-aware policy.
func BenchmarkStep(b *testing.B) {
	wc, _ := DefaultWorkload(KindShared)
	wc.Rate = 60
	w, err := Generate(wc)
	if err != nil {
		b.Fatal(err)
	}
	v, _ := LookupVariant(VariantKVCacheAware)
	fresh := func() *Simulator {
		s, err := NewSimulator(DefaultEngine(), w, v, false)
		if err != nil {
			b.Fatal(err)
		}
		for range 500 { // warm up to a loaded engine
			if _, err := s.Step(); err != nil {
				b.Fatal(err)
			}
		}
		return s
	}
	s := fresh()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		more, err := s.Step()
		if err != nil {
			b.Fatal(err)
		}
		if !more {
			b.StopTimer()
			s = fresh()
			b.StartTimer()
		}
	}
}

// BenchmarkDefaultRun measures a whole default comparison (coldstart, four
// variants), sequentially.
func BenchmarkDefaultRun(b *testing.B) {
	wc, _ := DefaultWorkload(KindColdStart)
	variants, _ := ParseVariants("")
	for b.Loop() {
		if _, err := Simulate(Options{Engine: DefaultEngine(), Workloads: []WorkloadConfig{wc}, Variants: variants, Parallel: 1}); err != nil {
			b.Fatal(err)
		}
	}
}
