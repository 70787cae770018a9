package idem

import "context"

// Request-context values read by Transport: they let code that only builds *http.Request
// values (a generated client) name the intent, the tenant and the per-call policy.

type ctxKey struct{}

type ctxValues struct {
	intent    string
	tenant    string
	hasTenant bool
	opts      []CallOption
}

func contextValues(ctx context.Context) ctxValues {
	v, _ := ctx.Value(ctxKey{}).(ctxValues)
	return v
}

// ContextWithIntent returns a context whose unsafe requests through a Transport belong to
// intent (see WithIntent): a restarted process sending the same intent continues its
// persisted key instead of minting a new one. An empty intent removes it. Without an intent
// (or a key header of the caller's) every request is a new intent under a new key, so after
// ErrOutcomeUnknown neither the application nor any retrying layer above the Transport may
// send it again: Recover or a business lookup settles the pending record.
func ContextWithIntent(ctx context.Context, intent string) context.Context {
	v := contextValues(ctx)
	v.intent = intent
	return context.WithValue(ctx, ctxKey{}, v)
}

// ContextWithTenant returns a context whose unsafe requests through a Transport are scoped
// to tenant, overriding Config.Tenant (see WithTenant).
func ContextWithTenant(ctx context.Context, tenant string) context.Context {
	v := contextValues(ctx)
	v.tenant, v.hasTenant = tenant, true
	return context.WithValue(ctx, ctxKey{}, v)
}

// ContextWithCallOptions returns a context whose unsafe requests through a Transport are
// sent with opts (after Transport.CallOptions and those already in ctx), such as
// CallMaxAttempts for one request of a generated client.
func ContextWithCallOptions(ctx context.Context, opts ...CallOption) context.Context {
	v := contextValues(ctx)
	v.opts = append(v.opts[:len(v.opts):len(v.opts)], opts...)
	return context.WithValue(ctx, ctxKey{}, v)
}
