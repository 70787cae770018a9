package idemotel

import (
	"reflect"
	"testing"

	"github.com/idemkit/idem"
)

// Every counter of idem.Stats is exported: a new field without a metric fails here.
// BudgetAvailable is a gauge, exported as idem.retry_budget.available.
func TestEveryStatExported(t *testing.T) {
	if n := reflect.TypeFor[idem.Stats]().NumField() - 1; n != len(counters) {
		t.Errorf("idem.Stats has %d counters, idemotel exports %d", n, len(counters))
	}
}
