// Package attestroutingconnector sends the GenAI part of a Collector's traces and logs to
// one set of pipelines (attest-otel's sidecar) and the rest to another, in one pass and
// without a copy of the data per pipeline. docs/genai-routing.md says why: at the
// Collector release the project tests, the filter processor needs three pipelines per
// signal, and copying each request for each of them is most of what routing costs.
//
// The markers are the dialects' own (tools/gen_routing.py writes them into
// collector-config/genai-routing-attest.yaml), and the test is the one attest-otel's
// Python states as `Markers.routes`: a span is GenAI when its scope is a GenAI scope, its
// name starts or ends with a marker, or it carries one of the routing keys.
package attestroutingconnector // import "github.com/attest-otel/attest-otel/collector/attestroutingconnector"

import (
	"errors"
	"strings"

	"go.opentelemetry.io/collector/pipeline"
)

// Config names the pipelines of each side and the markers.
type Config struct {
	// GenAI lists the pipelines that receive the GenAI items (traces and logs pipelines
	// may both be named; each signal uses its own).
	GenAI []pipeline.ID `mapstructure:"genai"`
	// Plain lists the pipelines that receive everything else.
	Plain []pipeline.ID `mapstructure:"plain"`

	// ScopeNames are instrumentation scope names that are GenAI as a whole (compared
	// without regard to case).
	ScopeNames []string `mapstructure:"scope_names"`
	// ScopeMarkers make a scope GenAI when its name contains one (without regard to case).
	ScopeMarkers []string `mapstructure:"scope_markers"`
	// SpanNamePrefixes and SpanNameSuffixes mark a span by its name (case as written).
	SpanNamePrefixes []string `mapstructure:"span_name_prefixes"`
	SpanNameSuffixes []string `mapstructure:"span_name_suffixes"`
	// EventNamePrefixes mark a log record by its event name.
	EventNamePrefixes []string `mapstructure:"event_name_prefixes"`
	// AttributeKeys mark a span or a log record that carries one of them.
	AttributeKeys []string `mapstructure:"attribute_keys"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// Validate refuses a config that would route nothing or route to nowhere.
func (c *Config) Validate() error {
	var errs []error
	if len(c.GenAI) == 0 {
		errs = append(errs, errors.New("genai: name the pipelines of the GenAI items"))
	}
	if len(c.Plain) == 0 {
		errs = append(errs, errors.New("plain: name the pipelines of everything else"))
	}
	if len(c.ScopeNames)+len(c.ScopeMarkers)+len(c.SpanNamePrefixes)+len(c.SpanNameSuffixes)+
		len(c.EventNamePrefixes)+len(c.AttributeKeys) == 0 {
		errs = append(errs, errors.New("no markers: every item would go to the plain pipelines"))
	}
	for _, id := range append(append([]pipeline.ID{}, c.GenAI...), c.Plain...) {
		if id.Signal() != pipeline.SignalTraces && id.Signal() != pipeline.SignalLogs {
			errs = append(errs, errors.New(id.String()+": only traces and logs pipelines are routed"))
		}
	}
	for _, g := range c.GenAI {
		for _, p := range c.Plain {
			if g == p {
				errs = append(errs, errors.New(g.String()+": named both genai and plain"))
			}
		}
	}
	for _, list := range [][]string{c.ScopeNames, c.ScopeMarkers, c.SpanNamePrefixes, c.SpanNameSuffixes, c.EventNamePrefixes, c.AttributeKeys} {
		for _, m := range list {
			if strings.TrimSpace(m) == "" {
				errs = append(errs, errors.New("an empty marker would match every item"))
			}
		}
	}
	return errors.Join(errs...)
}
