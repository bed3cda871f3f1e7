package attestroutingconnector // import "github.com/attest-otel/attest-otel/collector/attestroutingconnector"

import (
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// A resource or a scope whose items all go one way is moved whole; only a scope that
// mixes both is taken apart, its resource and scope copied to each side. No item is
// copied: pdata's MoveTo hands it over.
const (
	allPlain = iota
	allGenAI
	mixed
)

// plan is one resource's routing: a verdict per scope, and for the scopes that mix both,
// each item's mark.
type plan struct {
	verdicts []int
	marks    [][]bool
}

// decide tests each scope once, and each item of a scope that is not GenAI as a whole.
func decide(scopes int, scopeGenAI func(j int) bool, items func(j int) int, itemGenAI func(j, k int) bool) plan {
	p := plan{verdicts: make([]int, scopes), marks: make([][]bool, scopes)}
	for j := range scopes {
		if scopeGenAI(j) {
			p.verdicts[j] = allGenAI
			continue
		}
		marks := make([]bool, items(j))
		n := 0
		for k := range marks {
			if marks[k] = itemGenAI(j, k); marks[k] {
				n++
			}
		}
		switch n {
		case 0:
			p.verdicts[j] = allPlain
		case len(marks):
			p.verdicts[j] = allGenAI
		default:
			p.verdicts[j], p.marks[j] = mixed, marks
		}
	}
	return p
}

// whole is the resource's verdict: all plain (also when it has no scope), all GenAI, or mixed.
func (p plan) whole() int {
	v := allPlain
	for j, w := range p.verdicts {
		if w == mixed || (j > 0 && w != v) {
			return mixed
		}
		v = w
	}
	return v
}

// splitTraces moves every span of td into genai or plain; td is left empty.
func (m *markers) splitTraces(td ptrace.Traces) (genai, plain ptrace.Traces) {
	genai, plain = ptrace.NewTraces(), ptrace.NewTraces()
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		sss := rs.ScopeSpans()
		p := decide(sss.Len(),
			func(j int) bool { return m.scope(sss.At(j).Scope().Name()) },
			func(j int) int { return sss.At(j).Spans().Len() },
			func(j, k int) bool { s := sss.At(j).Spans().At(k); return m.span(s.Name(), s.Attributes()) })
		switch p.whole() {
		case allPlain:
			rs.MoveTo(plain.ResourceSpans().AppendEmpty())
			continue
		case allGenAI:
			rs.MoveTo(genai.ResourceSpans().AppendEmpty())
			continue
		}
		sides := [2]ptrace.ResourceSpans{plain.ResourceSpans().AppendEmpty(), genai.ResourceSpans().AppendEmpty()}
		for _, side := range sides {
			rs.Resource().CopyTo(side.Resource())
			side.SetSchemaUrl(rs.SchemaUrl())
		}
		for j, v := range p.verdicts {
			ss := sss.At(j)
			if v != mixed {
				ss.MoveTo(sides[v].ScopeSpans().AppendEmpty())
				continue
			}
			var parts [2]ptrace.SpanSlice
			for s, side := range sides {
				part := side.ScopeSpans().AppendEmpty()
				ss.Scope().CopyTo(part.Scope())
				part.SetSchemaUrl(ss.SchemaUrl())
				parts[s] = part.Spans()
			}
			spans := ss.Spans()
			for k, g := range p.marks[j] {
				spans.At(k).MoveTo(parts[b2i(g)].AppendEmpty())
			}
		}
	}
	return genai, plain
}

// splitLogs moves every log record of ld into genai or plain; ld is left empty.
func (m *markers) splitLogs(ld plog.Logs) (genai, plain plog.Logs) {
	genai, plain = plog.NewLogs(), plog.NewLogs()
	rls := ld.ResourceLogs()
	for i := 0; i < rls.Len(); i++ {
		rl := rls.At(i)
		sls := rl.ScopeLogs()
		p := decide(sls.Len(),
			func(j int) bool { return m.scope(sls.At(j).Scope().Name()) },
			func(j int) int { return sls.At(j).LogRecords().Len() },
			func(j, k int) bool { r := sls.At(j).LogRecords().At(k); return m.log(r.EventName(), r.Attributes()) })
		switch p.whole() {
		case allPlain:
			rl.MoveTo(plain.ResourceLogs().AppendEmpty())
			continue
		case allGenAI:
			rl.MoveTo(genai.ResourceLogs().AppendEmpty())
			continue
		}
		sides := [2]plog.ResourceLogs{plain.ResourceLogs().AppendEmpty(), genai.ResourceLogs().AppendEmpty()}
		for _, side := range sides {
			rl.Resource().CopyTo(side.Resource())
			side.SetSchemaUrl(rl.SchemaUrl())
		}
		for j, v := range p.verdicts {
			sl := sls.At(j)
			if v != mixed {
				sl.MoveTo(sides[v].ScopeLogs().AppendEmpty())
				continue
			}
			var parts [2]plog.LogRecordSlice
			for s, side := range sides {
				part := side.ScopeLogs().AppendEmpty()
				sl.Scope().CopyTo(part.Scope())
				part.SetSchemaUrl(sl.SchemaUrl())
				parts[s] = part.LogRecords()
			}
			records := sl.LogRecords()
			for k, g := range p.marks[j] {
				records.At(k).MoveTo(parts[b2i(g)].AppendEmpty())
			}
		}
	}
	return genai, plain
}

// b2i indexes a side: 0 plain, 1 GenAI (the order of allPlain and allGenAI).
func b2i(genai bool) int {
	if genai {
		return allGenAI
	}
	return allPlain
}
