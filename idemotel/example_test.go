package idemotel_test

import (
	"context"
	"fmt"
	"net/http"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/idemtest"
)

// Register exports a Client's counters through any OpenTelemetry meter; here the SDK's
// ManualReader collects them once, where a service would use its exporter.
func ExampleRegister() {
	api := idemtest.NewServer(idemtest.Config{RetryAfter: -1})
	defer api.Close()
	api.Script(idemtest.Fault503)
	c, _ := idem.NewClient(idem.Config{BaseURL: api.URL})

	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	reg, err := idemotel.Register(provider.Meter("payments"), c)
	if err != nil {
		panic(err)
	}
	defer reg.Unregister()

	_, _ = c.Do(context.Background(), idem.NewOperation(http.MethodPost, "/v1/payments",
		[]byte(`{"amount":100,"currency":"EUR","customer":"c"}`)))

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch m.Name {
		case "idem.calls", "idem.attempts", "idem.retries", "idem.succeeded":
			fmt.Println(m.Name, m.Data.(metricdata.Sum[int64]).DataPoints[0].Value)
		}
	}
	// Output:
	// idem.calls 1
	// idem.succeeded 1
	// idem.attempts 2
	// idem.retries 1
}
