package pacer

// Test-only views of a pacer's storage that work after Close, so a test can
// check that a slot came back to a closed pacer.

// CountersAfterClose reads the counters even when p is closed.
func (p *Pacer) CountersAfterClose() (Counters, error) { return p.mem.counters() }

// InfoAfterClose reads the state even when p is closed.
func (p *Pacer) InfoAfterClose() (Info, error) { return p.mem.info() }
