package attestroutingconnector // import "github.com/attest-otel/attest-otel/collector/attestroutingconnector"

import (
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// markers is the config compiled for the per-item test: lower-cased scope markers, a set
// of routing keys. Read-only once built, so every receiver goroutine shares it.
type markers struct {
	scopeNames   map[string]struct{}
	scopeMarkers []string
	prefixes     []string
	suffixes     []string
	events       []string
	keys         map[string]struct{}
}

func newMarkers(c *Config) *markers {
	m := &markers{
		scopeNames: make(map[string]struct{}, len(c.ScopeNames)),
		prefixes:   c.SpanNamePrefixes,
		suffixes:   c.SpanNameSuffixes,
		events:     c.EventNamePrefixes,
		keys:       make(map[string]struct{}, len(c.AttributeKeys)),
	}
	for _, s := range c.ScopeNames {
		m.scopeNames[strings.ToLower(s)] = struct{}{}
	}
	for _, s := range c.ScopeMarkers {
		m.scopeMarkers = append(m.scopeMarkers, strings.ToLower(s))
	}
	for _, k := range c.AttributeKeys {
		m.keys[k] = struct{}{}
	}
	return m
}

// scope says whether every item of a scope is GenAI: tested once per scope.
func (m *markers) scope(name string) bool {
	if name == "" {
		return false
	}
	low := strings.ToLower(name)
	if _, ok := m.scopeNames[low]; ok {
		return true
	}
	for _, marker := range m.scopeMarkers {
		if strings.Contains(low, marker) {
			return true
		}
	}
	return false
}

func (m *markers) span(name string, attrs pcommon.Map) bool {
	return hasAny(name, m.prefixes, strings.HasPrefix) || hasAny(name, m.suffixes, strings.HasSuffix) || m.keyed(attrs)
}

func (m *markers) log(eventName string, attrs pcommon.Map) bool {
	return hasAny(eventName, m.events, strings.HasPrefix) || m.keyed(attrs)
}

func hasAny(s string, affixes []string, has func(string, string) bool) bool {
	for _, a := range affixes {
		if has(s, a) {
			return true
		}
	}
	return false
}

// keyed walks the item's attributes once; looking each routing key up instead would walk
// them once per key.
func (m *markers) keyed(attrs pcommon.Map) bool {
	found := false
	attrs.Range(func(k string, _ pcommon.Value) bool {
		_, found = m.keys[k]
		return !found
	})
	return found
}
