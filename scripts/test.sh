#!/usr/bin/env bash
# The tests, as README.md and CI run them: `go test -race` over the root module and every
# nested module (each directory below the root with a go.mod). keystore/pgstore,
# idemserver/pgserver, cmd/idemctl, idemriver (and idemdbos) and the payments demo's fleet test need
# PostgreSQL: when
# IDEM_TEST_PG_DSN is not set, a throwaway server is
# started with .ci/postgres.sh (which installs Debian's postgresql package if initdb is
# missing) and stopped on exit. idemstripe's tests run stripe-go against stripe-mock, which
# .ci/stripe-mock.sh installs with `go install` when it is missing. Extra arguments go to
# every `go test`, e.g. -run TestX.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/postgres.sh
. .ci/stripe-mock.sh

stripe_mock_install

if [ -z "${IDEM_TEST_PG_DSN:-}" ]; then
  echo "== postgres for keystore/pgstore, idemserver/pgserver, cmd/idemctl, idemriver, idemdbos, examples/payments"
  pg_start
fi

nested=$(find . -mindepth 2 -name go.mod -not -path '*/testdata/*' -not -path './.*' -printf '%h\n' | sort)
echo "== tests: the root module, then every nested module:" $nested
# Every module runs even when an earlier one fails; the exit status says whether all passed.
failed=""
go test -race -count=1 "$@" ./... || failed="$failed ."
# Allocation counts differ under -race, where TestMiddlewareAllocations skips: run it without.
go test -count=1 -run '^TestMiddlewareAllocations$' ./idemserver/ || failed="$failed idemserver(allocations)"
for m in $nested; do
  echo "== [${SECONDS}s] $m"
  (cd "$m" && go test -race -count=1 "$@" ./...) || failed="$failed $m"
done
if [ -n "$failed" ]; then
  echo "== FAILED in:$failed"
  exit 1
fi
echo "== all modules passed: the root module and" $nested
