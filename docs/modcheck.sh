#!/usr/bin/env bash
# modcheck: can a user fetch each module of this repository on its own, as published?
#
# It publishes every module (the root and each directory with a go.mod) at v0.1.0 into a
# file-based module proxy built from the work tree (docs/modzip.go), then, for each module,
# creates a fresh module in a temporary directory, outside go.work, that `go get`s only that
# module at v0.1.0 and loads all of its packages and their imports (go list -deps). That is
# what fails when a nested module needs a replace directive or a root version that does not
# exist.
#
# Third-party modules come from the local module cache first, then the Go module proxy, so a
# machine that has run the tests once needs no network. Checksums of this repository's
# modules are not looked up in the checksum database (GONOSUMDB): they are not published.
#
# Usage: docs/modcheck.sh [VERSION]   (default v0.1.0; the nested modules require that one)
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-v0.1.0}

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
proxy="$work/proxy"
mods=$(go run docs/modzip.go -out "$proxy" -version "$version")
echo "published at $version into a file proxy:"
echo "$mods" | sed 's/^/  /'

cache=$(go env GOMODCACHE)
export GOPROXY="file://$proxy,file://$cache/cache/download,https://proxy.golang.org"
export GOMODCACHE="$work/modcache" # fresh: nothing of this repository cached from an earlier run
export GONOSUMDB=github.com/idemkit GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local
goversion=$(sed -n 's/^go //p' go.mod)

fail=0
while read -r path dir; do
  user="$work/user-$(echo "$dir" | tr '/.' '__')"
  mkdir -p "$user"
  printf 'module example.com/modcheck\n\ngo %s\n' "$goversion" > "$user/go.mod"
  # go list -deps loads every package and import from the published modules alone, which is
  # what fails when a replace or an unpublished version is needed; it compiles nothing (the
  # code itself is built and tested in the workspace), which keeps this check to seconds.
  if (cd "$user" && go get "$path@$version" >"$user/log" 2>&1 && go list -deps "$path/..." >/dev/null 2>>"$user/log"); then
    echo "ok   $path@$version: go get alone, go list -deps $path/..."
  else
    echo "FAIL $path@$version ($dir):"; sed 's/^/     /' "$user/log"; fail=1
  fi
done <<< "$mods"
exit $fail
