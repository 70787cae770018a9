// Package payments is the client that oapi-codegen generates from openapi.yaml, the
// payments API that idemtest serves. Nothing here knows about idem: the example runs it over
// idem by giving it idem.NewHTTPClient (payments.WithHTTPClient).
package payments

//go:generate go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2 -config cfg.yaml openapi.yaml
