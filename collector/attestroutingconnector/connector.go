package attestroutingconnector // import "github.com/attest-otel/attest-otel/collector/attestroutingconnector"

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pipeline"
)

const typeStr = "attest_routing"

// NewFactory is what collector-config/builder-config.yaml builds in.
func NewFactory() connector.Factory {
	return connector.NewFactory(
		component.MustNewType(typeStr),
		func() component.Config { return &Config{} },
		connector.WithTracesToTraces(createTraces, component.StabilityLevelAlpha),
		connector.WithLogsToLogs(createLogs, component.StabilityLevelAlpha),
	)
}

// router is what the Collector hands a connector that feeds several pipelines of one
// signal (connector.TracesRouterAndConsumer, connector.LogsRouterAndConsumer).
type router[C any] interface {
	PipelineIDs() []pipeline.ID
	Consumer(...pipeline.ID) (C, error)
}

// base is the part of a traces or logs connector that does not depend on the signal: the
// two sides it feeds and the markers.
type base[C any] struct {
	component.StartFunc
	component.ShutdownFunc
	markers      *markers
	genai, plain C
}

// newBase finds, among the pipelines the connector feeds for one signal, the GenAI ones and
// the plain ones; a pipeline it feeds that the config does not name is a mistake.
func newBase[C any](cfg component.Config, next any, signal pipeline.Signal) (base[C], error) {
	var b base[C]
	r, ok := next.(router[C])
	if !ok {
		return b, errors.New(typeStr + ": expected a router to several pipelines")
	}
	c := cfg.(*Config)
	pick := func(ids []pipeline.ID) []pipeline.ID {
		var out []pipeline.ID
		for _, id := range ids {
			if id.Signal() == signal {
				out = append(out, id)
			}
		}
		return out
	}
	g, p := pick(c.GenAI), pick(c.Plain)
	for _, id := range r.PipelineIDs() {
		if !slices.Contains(g, id) && !slices.Contains(p, id) {
			return b, fmt.Errorf("%s reads from %s but is named in neither genai nor plain", id, typeStr)
		}
	}
	if len(g) == 0 || len(p) == 0 {
		return b, fmt.Errorf("%s: name a genai and a plain %s pipeline", typeStr, signal)
	}
	var err error
	if b.genai, err = r.Consumer(g...); err != nil {
		return b, err
	}
	if b.plain, err = r.Consumer(p...); err != nil {
		return b, err
	}
	b.markers = newMarkers(c)
	return b, nil
}

// Capabilities: the items are moved out of what the connector is given.
func (base[C]) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: true}
}

// deliver hands each side its part, if it has one; the plain side first, so that what does
// not concern the grader is on its way whatever the GenAI side answers.
func deliver(plain, genai int, toPlain, toGenAI func() error) error {
	var errs []error
	if plain > 0 {
		errs = append(errs, toPlain())
	}
	if genai > 0 {
		errs = append(errs, toGenAI())
	}
	return errors.Join(errs...)
}

type tracesRouter struct{ base[consumer.Traces] }

func createTraces(_ context.Context, _ connector.Settings, cfg component.Config, next consumer.Traces) (connector.Traces, error) {
	b, err := newBase[consumer.Traces](cfg, next, pipeline.SignalTraces)
	if err != nil {
		return nil, err
	}
	return &tracesRouter{b}, nil
}

func (r *tracesRouter) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	genai, plain := r.markers.splitTraces(td)
	return deliver(plain.ResourceSpans().Len(), genai.ResourceSpans().Len(),
		func() error { return r.plain.ConsumeTraces(ctx, plain) },
		func() error { return r.genai.ConsumeTraces(ctx, genai) })
}

type logsRouter struct{ base[consumer.Logs] }

func createLogs(_ context.Context, _ connector.Settings, cfg component.Config, next consumer.Logs) (connector.Logs, error) {
	b, err := newBase[consumer.Logs](cfg, next, pipeline.SignalLogs)
	if err != nil {
		return nil, err
	}
	return &logsRouter{b}, nil
}

func (r *logsRouter) ConsumeLogs(ctx context.Context, ld plog.Logs) error {
	genai, plain := r.markers.splitLogs(ld)
	return deliver(plain.ResourceLogs().Len(), genai.ResourceLogs().Len(),
		func() error { return r.plain.ConsumeLogs(ctx, plain) },
		func() error { return r.genai.ConsumeLogs(ctx, genai) })
}
