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

// sides finds, among the pipelines this connector feeds for one signal, the GenAI ones and
// the plain ones; a pipeline it feeds that the config does not name is a mistake.
func sides[T any](cfg *Config, signal pipeline.Signal, feeds []pipeline.ID, consumerOf func(...pipeline.ID) (T, error)) (genai, plain T, err error) {
	pick := func(ids []pipeline.ID) []pipeline.ID {
		var out []pipeline.ID
		for _, id := range ids {
			if id.Signal() == signal {
				out = append(out, id)
			}
		}
		return out
	}
	g, p := pick(cfg.GenAI), pick(cfg.Plain)
	for _, id := range feeds {
		if !slices.Contains(g, id) && !slices.Contains(p, id) {
			return genai, plain, fmt.Errorf("%s reads from %s but is named in neither genai nor plain", id, typeStr)
		}
	}
	if len(g) == 0 || len(p) == 0 {
		return genai, plain, fmt.Errorf("%s: name a genai and a plain %s pipeline", typeStr, signal)
	}
	if genai, err = consumerOf(g...); err != nil {
		return genai, plain, err
	}
	plain, err = consumerOf(p...)
	return genai, plain, err
}

type base struct {
	component.StartFunc
	component.ShutdownFunc
	markers *markers
}

// Capabilities: the spans are moved out of what the connector is given.
func (base) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: true}
}

type tracesRouter struct {
	base
	genai, plain consumer.Traces
}

func createTraces(_ context.Context, _ connector.Settings, cfg component.Config, next consumer.Traces) (connector.Traces, error) {
	router, ok := next.(connector.TracesRouterAndConsumer)
	if !ok {
		return nil, errors.New(typeStr + ": expected a router to several pipelines")
	}
	c := cfg.(*Config)
	genai, plain, err := sides(c, pipeline.SignalTraces, router.PipelineIDs(), router.Consumer)
	if err != nil {
		return nil, err
	}
	return &tracesRouter{base: base{markers: newMarkers(c)}, genai: genai, plain: plain}, nil
}

// ConsumeTraces hands each side its part; the plain side first, so that what does not
// concern the grader is on its way whatever the GenAI side answers.
func (r *tracesRouter) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	genai, plain := r.markers.splitTraces(td)
	var errs []error
	if plain.ResourceSpans().Len() > 0 {
		errs = append(errs, r.plain.ConsumeTraces(ctx, plain))
	}
	if genai.ResourceSpans().Len() > 0 {
		errs = append(errs, r.genai.ConsumeTraces(ctx, genai))
	}
	return errors.Join(errs...)
}

type logsRouter struct {
	base
	genai, plain consumer.Logs
}

func createLogs(_ context.Context, _ connector.Settings, cfg component.Config, next consumer.Logs) (connector.Logs, error) {
	router, ok := next.(connector.LogsRouterAndConsumer)
	if !ok {
		return nil, errors.New(typeStr + ": expected a router to several pipelines")
	}
	c := cfg.(*Config)
	genai, plain, err := sides(c, pipeline.SignalLogs, router.PipelineIDs(), router.Consumer)
	if err != nil {
		return nil, err
	}
	return &logsRouter{base: base{markers: newMarkers(c)}, genai: genai, plain: plain}, nil
}

func (r *logsRouter) ConsumeLogs(ctx context.Context, ld plog.Logs) error {
	genai, plain := r.markers.splitLogs(ld)
	var errs []error
	if plain.ResourceLogs().Len() > 0 {
		errs = append(errs, r.plain.ConsumeLogs(ctx, plain))
	}
	if genai.ResourceLogs().Len() > 0 {
		errs = append(errs, r.genai.ConsumeLogs(ctx, genai))
	}
	return errors.Join(errs...)
}
