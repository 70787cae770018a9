# stripe-mock for idemstripe's tests (they start it themselves on a Unix socket, and fail
# under CI=true without it). Source this file, then call stripe_mock_install: it runs
# `go install github.com/stripe/stripe-mock@v0.203.0` only when no stripe-mock is on PATH, in
# $GOBIN or in $(go env GOPATH)/bin (the tests look there too), so a machine that has it
# pays nothing. The module comes from the Go module proxy (a few seconds to build).
STRIPE_MOCK_VERSION=v0.203.0

stripe_mock_install() {
  if command -v stripe-mock >/dev/null 2>&1; then return 0; fi
  local d
  for d in "$(go env GOBIN)" $(go env GOPATH | tr ':' ' '); do
    [ -n "$d" ] || continue
    [ -x "$d/stripe-mock" ] && return 0
    [ -x "$d/bin/stripe-mock" ] && return 0
  done
  echo "== installing stripe-mock $STRIPE_MOCK_VERSION (go install) for idemstripe's tests"
  go install "github.com/stripe/stripe-mock@$STRIPE_MOCK_VERSION"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  stripe_mock_install
fi
