package attestroutingconnector

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pipeline"
)

var (
	tracesGenAI = pipeline.NewIDWithName(pipeline.SignalTraces, "genai")
	tracesPlain = pipeline.NewIDWithName(pipeline.SignalTraces, "plain")
	logsGenAI   = pipeline.NewIDWithName(pipeline.SignalLogs, "genai")
	logsPlain   = pipeline.NewIDWithName(pipeline.SignalLogs, "plain")
)

func testConfig() *Config {
	return &Config{
		GenAI:             []pipeline.ID{tracesGenAI, logsGenAI},
		Plain:             []pipeline.ID{tracesPlain, logsPlain},
		ScopeNames:        []string{"ai"},
		ScopeMarkers:      []string{"openinference"},
		SpanNamePrefixes:  []string{"chat", "execute_tool"},
		SpanNameSuffixes:  []string{".agent"},
		EventNamePrefixes: []string{"gen_ai."},
		AttributeKeys:     []string{"gen_ai.operation.name"},
	}
}

func addSpans(ss ptrace.ScopeSpans, names ...string) {
	for _, n := range names {
		ss.Spans().AppendEmpty().SetName(n)
	}
}

func spanNames(sink *consumertest.TracesSink) map[string]string {
	out := map[string]string{}
	for _, td := range sink.AllTraces() {
		for i := 0; i < td.ResourceSpans().Len(); i++ {
			rs := td.ResourceSpans().At(i)
			service, _ := rs.Resource().Attributes().Get("service.name")
			for j := 0; j < rs.ScopeSpans().Len(); j++ {
				ss := rs.ScopeSpans().At(j)
				for k := 0; k < ss.Spans().Len(); k++ {
					out[ss.Spans().At(k).Name()] = service.Str() + "/" + ss.Scope().Name() + "@" + ss.SchemaUrl()
				}
			}
		}
	}
	return out
}

func TestSpansGoWhereTheMarkersSayAndKeepTheirResourceAndScope(t *testing.T) {
	genai, plain := new(consumertest.TracesSink), new(consumertest.TracesSink)
	router := connector.NewTracesRouter(map[pipeline.ID]consumer.Traces{tracesGenAI: genai, tracesPlain: plain})
	c, err := NewFactory().CreateTracesToTraces(context.Background(), connectortest.NewNopSettings(NewFactory().Type()), testConfig(), router)
	if err != nil {
		t.Fatal(err)
	}
	td := ptrace.NewTraces()
	// An app with a GenAI scope (whole), a mixed scope, and a plain scope.
	app := td.ResourceSpans().AppendEmpty()
	app.Resource().Attributes().PutStr("service.name", "app")
	addSpans(app.ScopeSpans().AppendEmpty(), "GET /health")
	app.ScopeSpans().At(0).Scope().SetName("net/http")
	oi := app.ScopeSpans().AppendEmpty()
	oi.Scope().SetName("OpenInference.instrumentation.langchain")
	addSpans(oi, "RunnableSequence")
	mixed := app.ScopeSpans().AppendEmpty()
	mixed.Scope().SetName("acme")
	mixed.SetSchemaUrl("https://opentelemetry.io/schemas/1.37.0")
	addSpans(mixed, "chat gpt-4o", "SELECT orders", "billing.agent", "charge", "execute_tool lookup")
	mixed.Spans().At(3).Attributes().PutStr("gen_ai.operation.name", "execute_tool")
	// A plain service and an all-GenAI one: moved whole.
	db := td.ResourceSpans().AppendEmpty()
	db.Resource().Attributes().PutStr("service.name", "db")
	addSpans(db.ScopeSpans().AppendEmpty(), "query")
	vercel := td.ResourceSpans().AppendEmpty()
	vercel.Resource().Attributes().PutStr("service.name", "vercel")
	vercel.ScopeSpans().AppendEmpty().Scope().SetName("AI")
	addSpans(vercel.ScopeSpans().At(0), "doStream")

	if err := c.ConsumeTraces(context.Background(), td); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"RunnableSequence":    "app/OpenInference.instrumentation.langchain@",
		"chat gpt-4o":         "app/acme@https://opentelemetry.io/schemas/1.37.0",
		"billing.agent":       "app/acme@https://opentelemetry.io/schemas/1.37.0",
		"charge":              "app/acme@https://opentelemetry.io/schemas/1.37.0",
		"execute_tool lookup": "app/acme@https://opentelemetry.io/schemas/1.37.0",
		"doStream":            "vercel/AI@",
	}
	assertSame(t, "genai", spanNames(genai), want)
	assertSame(t, "plain", spanNames(plain), map[string]string{
		"GET /health":   "app/net/http@",
		"SELECT orders": "app/acme@https://opentelemetry.io/schemas/1.37.0",
		"query":         "db/@",
	})
	if genai.SpanCount()+plain.SpanCount() != 9 || len(genai.AllTraces()) != 1 || len(plain.AllTraces()) != 1 {
		t.Fatalf("each side gets one request and every span once: %d + %d", genai.SpanCount(), plain.SpanCount())
	}
}

func TestLogRecordsByScopeEventNameAndKeys(t *testing.T) {
	genai, plain := new(consumertest.LogsSink), new(consumertest.LogsSink)
	router := connector.NewLogsRouter(map[pipeline.ID]consumer.Logs{logsGenAI: genai, logsPlain: plain})
	c, err := NewFactory().CreateLogsToLogs(context.Background(), connectortest.NewNopSettings(NewFactory().Type()), testConfig(), router)
	if err != nil {
		t.Fatal(err)
	}
	ld := plog.NewLogs()
	sl := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty()
	sl.LogRecords().AppendEmpty().SetEventName("gen_ai.choice")
	sl.LogRecords().AppendEmpty().Body().SetStr("disk full")
	sl.LogRecords().AppendEmpty().Attributes().PutStr("gen_ai.operation.name", "chat")
	if err := c.ConsumeLogs(context.Background(), ld); err != nil {
		t.Fatal(err)
	}
	if genai.LogRecordCount() != 2 || plain.LogRecordCount() != 1 {
		t.Fatalf("genai %d, plain %d", genai.LogRecordCount(), plain.LogRecordCount())
	}
	got := plain.AllLogs()[0].ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Body().Str()
	if got != "disk full" {
		t.Fatalf("plain got %q", got)
	}
}

func TestAPipelineNamedOnNeitherSideIsRefused(t *testing.T) {
	other := pipeline.NewIDWithName(pipeline.SignalTraces, "other")
	router := connector.NewTracesRouter(map[pipeline.ID]consumer.Traces{
		tracesGenAI: consumertest.NewNop(), tracesPlain: consumertest.NewNop(), other: consumertest.NewNop(),
	})
	_, err := NewFactory().CreateTracesToTraces(context.Background(), connectortest.NewNopSettings(NewFactory().Type()), testConfig(), router)
	if err == nil {
		t.Fatal("a pipeline the config does not place must be refused")
	}
}

func TestConfigValidation(t *testing.T) {
	if err := testConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*Config){
		"no genai":   func(c *Config) { c.GenAI = nil },
		"no plain":   func(c *Config) { c.Plain = nil },
		"both sides": func(c *Config) { c.Plain = append(c.Plain, tracesGenAI) },
		"empty":      func(c *Config) { c.ScopeMarkers = append(c.ScopeMarkers, " ") },
		"metrics":    func(c *Config) { c.Plain = append(c.Plain, pipeline.NewID(pipeline.SignalMetrics)) },
		"no markers": func(c *Config) {
			*c = Config{GenAI: c.GenAI, Plain: c.Plain}
		},
	} {
		c := testConfig()
		change(c)
		if c.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func assertSame(t *testing.T, side string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %v, want %v", side, got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: %q went to %q, want %q (all: %v)", side, k, got[k], v, got)
		}
	}
}
