package idemotel_test

import (
	"context"
	"fmt"
	"net/http"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/event"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/idemtest"
)

// A Tracer's hooks go into the client's Config; calls made through Tracer.Do get a span,
// an attempt span per request (resends carry http.request.resend_count) and events for the
// waits. Here a 503 (without Retry-After: idem backs off) is followed by a 201.
func ExampleTracer() {
	api := idemtest.NewServer(idemtest.Config{RetryAfter: -1})
	defer api.Close()
	api.Script(idemtest.Fault503)

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	tr, err := idemotel.NewTracer(tp)
	if err != nil {
		panic(err)
	}
	c, err := idem.NewClient(idem.Config{BaseURL: api.URL, Hooks: tr.Hooks(event.Hooks{})})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	op := idem.NewOperation(http.MethodPost, "/v1/payments", []byte(`{"amount":100,"currency":"EUR","customer":"c"}`))
	if _, err := tr.Do(context.Background(), c, op); err != nil {
		panic(err)
	}
	for _, s := range exp.GetSpans() {
		fmt.Print(s.Name)
		for _, a := range s.Attributes {
			switch a.Key {
			case idemotel.AttrResendCount, idemotel.AttrStatusCode, idemotel.AttrOutcome:
				fmt.Printf(" %s=%s", a.Key, a.Value.String())
			}
		}
		for _, e := range s.Events {
			fmt.Printf(" [%s]", e.Name)
		}
		fmt.Println()
	}
	// Output:
	// POST http.response.status_code=503
	// POST http.request.resend_count=1 http.response.status_code=201
	// idem.call idem.outcome=succeeded http.response.status_code=201 [idem.wait]
}
