package idemadmin_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemadmin"
)

// The operator's view on a service's admin port, behind the service's own authorisation.
func ExampleNewHandler() {
	c, _ := idem.NewClient(idem.Config{BaseURL: "https://api.example.com"})
	defer c.Close()
	checkAdminToken := func(r *http.Request) error {
		if r.Header.Get("Authorization") != "Bearer admin-token" {
			return errors.New("an admin token is required")
		}
		return nil
	}
	markOrderFromRecover := func(r idem.Reconciled) { fmt.Println("settled", r.Record.Intent) }
	adminMux := http.NewServeMux()

	admin := idemadmin.NewHandler(c, idemadmin.Options{
		Authorize:    func(r *http.Request) error { return checkAdminToken(r) }, // required
		OnReconciled: markOrderFromRecover,                                      // as given to Recover
	})
	adminMux.Handle("/idem/", http.StripPrefix("/idem", admin))

	for _, token := range []string{"", "Bearer admin-token"} {
		req := httptest.NewRequest(http.MethodGet, "/idem/records?state=pending,manual&min_age=10m", nil)
		req.Header.Set("Authorization", token)
		w := httptest.NewRecorder()
		adminMux.ServeHTTP(w, req)
		fmt.Println(w.Code)
	}
	// Output:
	// 401
	// 200
}
