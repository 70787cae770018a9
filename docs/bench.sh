#!/usr/bin/env bash
# Runs every benchmark of DESIGN.md §6 and prints the figures docs/PERFORMANCE.md reports:
# benchstat tables (median and 95% confidence interval over COUNT runs) and, per metric,
# each variant's ratio against its baseline from the same run.
#
#   bash docs/bench.sh                 # COUNT=6, raw output in a new /tmp/idem-bench.* folder
#   COUNT=10 OUT=/tmp/b bash docs/bench.sh
#   ONLY="recover-expired purge" bash docs/bench.sh   # only the benchmarks named (see run below)
#
# Each benchmark binary is built once and run COUNT times with -test.count 1, so that the
# variants of one benchmark are interleaved (A B C A B C ...) rather than run back to back:
# drift of a shared machine then affects every variant alike. The bbolt files live in
# TMPDIR: point it at a real disk, not a tmpfs, or the fsync figures mean nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

COUNT=${COUNT:-6}
OUT=${OUT:-$(mktemp -d /tmp/idem-bench.XXXXXX)}
mkdir -p "$OUT"
export PATH="$PATH:$(go env GOPATH)/bin"
if ! command -v benchstat >/dev/null; then
	go install golang.org/x/perf/cmd/benchstat@latest
fi

{
	echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown) $(git status --porcelain 2>/dev/null | grep -q . && echo '(dirty tree)')"
	echo "go:      $(go version)"
	echo "kernel:  $(uname -sr)"
	cpuinfo() { grep -m1 "^$1[[:space:]]*:" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'; }
	vm=$(grep -qw hypervisor /proc/cpuinfo && echo ", virtual machine" || true)
	echo "cpu:     $(cpuinfo 'model name') (family $(cpuinfo 'cpu family'), model $(cpuinfo model), $(cpuinfo 'cpu MHz') MHz$vm)"
	echo "nproc:   $(nproc)"
	echo "memory:  $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
	echo "TMPDIR:  ${TMPDIR:-/tmp} on $(df -T "${TMPDIR:-/tmp}" | awk 'NR==2 {print $1, $2}')"
} | tee "$OUT/machine.txt"

go test -c -o "$OUT/idem.test" .
go test -c -o "$OUT/boltstore.test" ./keystore/boltstore/
go test -c -o "$OUT/idemserver.test" ./idemserver/

# run NAME BINARY ARGS...: COUNT interleaved runs into $OUT/NAME.txt.
run() {
	local name=$1 bin=$2
	shift 2
	if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then
		return 0
	fi
	: >"$OUT/$name.txt"
	for i in $(seq "$COUNT"); do
		echo "== $name run $i/$COUNT" >&2
		"$bin" -test.run '^$' -test.count 1 "$@" | tee -a "$OUT/$name.txt" | grep '^Benchmark' >&2
	done
}

# a. per-call overhead: loopback, then in-process (client cost alone). Fixed iteration count:
#    idem's Memory store keeps every record, so its heap (and GC work) grows with b.N.
run overhead "$OUT/idem.test" -test.bench '^BenchmarkOverhead(InProcess)?$' -test.benchtime 20000x
# b. retry amplification while the server is down.
run amplification "$OUT/idem.test" -test.bench '^BenchmarkAmplification$' -test.benchtime 1s
# c. reconciliation of 10,000 pending bbolt records: one iteration is 10,000 records.
run recover "$OUT/idem.test" -test.bench '^BenchmarkRecover$' -test.benchtime 1x
# d. durable persists per second (keystore/boltstore/bench_test.go), from the package folder.
(cd keystore/boltstore && run persist "$OUT/boltstore.test" -test.bench '^BenchmarkPersist$')
# e. durable calls against their floor and against retryablehttp (bench_durable_test.go).
run durable "$OUT/idem.test" -test.bench '^BenchmarkDurable$' -test.benchtime 2000x
# f. bbolt freelist options: a lone write in a fresh file and after 200k records were purged.
#    Slow to set up (200k records per variant), so SLOW_COUNT runs (default 1).
COUNT=${SLOW_COUNT:-1} run freelist "$OUT/boltstore.test" -test.bench '^BenchmarkFreelist$' -test.benchtime 300x
# g. 200k-call soak with a 2 s retention: file size and RSS at half and at the end.
COUNT=${SLOW_COUNT:-1} run soak "$OUT/idem.test" -test.bench '^BenchmarkSoak$' -test.benchtime 200000x
# h. Recover of N pending records whose leases expired (a restart after an outage), with Do
#    calls made meanwhile: records/s and the calls' p99 against before. N from
#    IDEM_BENCH_RECOVER_SIZES (default 10000,100000; add 1000000 for the large case: about
#    1.5 min of setup and a Recover of several minutes). Keys are UUIDv7, as NewOperation
#    mints; IDEM_BENCH_RECOVER_KEYS=v4 gives random keys (the worst case, slow to set up).
COUNT=${SLOW_COUNT:-1} run recover-expired "$OUT/idem.test" -test.bench '^BenchmarkRecoverExpired$' -test.benchtime 1x
#    The store's half alone: ClaimExpired draining N expired leases (IDEM_BENCH_CLAIM_SIZES,
#    default 10000,100000; 1000000 sets up in seconds, drains in minutes).
(cd keystore/boltstore && COUNT=${SLOW_COUNT:-1} run claim "$OUT/boltstore.test" -test.bench '^BenchmarkClaimExpired$' -test.benchtime 1x)
# i. durable calls paced at 2,500/s (IDEM_BENCH_PURGE_RATE sets another pace) with a 2 s
#    retention: purging on against off.
run purge "$OUT/idem.test" -test.bench '^BenchmarkPurgeLatency$' -test.benchtime 30000x
# k. Memory store soak: RSS and the runtime's memory classes at each quarter of 1.2M calls.
COUNT=${SLOW_COUNT:-1} run soak-memory "$OUT/idem.test" -test.bench '^BenchmarkSoakMemory$' -test.benchtime 1200000x
# The server middleware on Memory against a bare handler, in process: the time ratio (its
# "ratio" metric), allocations, and what Memory keeps per key with the collector's share.
# (pgserver's benchmark needs PostgreSQL: docs/PERFORMANCE.md section i gives its command.)
(cd idemserver && run middleware "$OUT/idemserver.test" -test.bench '^BenchmarkMiddleware(InProcess|MemoryGC)$' -test.benchtime 20000x)
# fdatasync/fsync calls of 2000 lone durable calls (strace, if installed).
if command -v strace >/dev/null && { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" fdatasync "* ]]; }; then
	strace -f -c -e trace=fdatasync,fsync -o "$OUT/strace.txt" "$OUT/idem.test" -test.run '^$' \
		-test.bench '^BenchmarkDurable$/^idem-bolt$/^c=1$' -test.benchtime 2000x >"$OUT/strace-bench.txt"
fi

# ratios NAME: median of every metric and its ratio to the baseline variant of the same
# benchmark, from benchstat's CSV.
ratios() {
	benchstat -format csv "$OUT/$1.txt" 2>/dev/null | awk -F, '
		function base(n,   g) {
			if (n ~ /^Persist\/store\//) { sub(/\/store\//, "/raw-update/", n); return n }
			if (n ~ /^Overhead/) { g = n; sub(/\/.*/, "", g); return g "/retryablehttp" }
			if (n ~ /^Amplification\//) return "Amplification/retryablehttp-defaults"
			if (n ~ /^Recover\//) return "Recover/baseline"
			if (n ~ /^Durable\/idem-bolt\/c=1$/) return "Durable/floor/c=1"
			if (n ~ /^Durable\/idem-bolt\//) { sub(/idem-bolt/, "retryablehttp", n); return n }
			if (n ~ /^Freelist\/.*\/purged-200k$/) { sub(/purged-200k/, "fresh", n); return n }
			if (n ~ /^PurgeLatency\/purge=on$/) return "PurgeLatency/purge=off"
			return ""
		}
		$1 == "" && $2 != "" && $3 == "CI" { unit = $2; next }
		$1 != "" && $1 != "geomean" && $2 ~ /^[0-9.e+-]+$/ {
			n = $1; sub(/-[0-9]+$/, "", n)
			v[unit, n] = $2; if (!((unit, n) in seen)) { seen[unit, n] = 1; order[++k] = unit SUBSEP n }
		}
		END {
			printf "| %-40s | %-20s | %12s | %-36s | %7s |\n", "benchmark", "unit", "median", "ratio to", "ratio"
			printf "|%s|%s|%s|%s|%s|\n", "---", "---", "---:", "---", "---:"
			for (i = 1; i <= k; i++) {
				split(order[i], p, SUBSEP); u = p[1]; n = p[2]; b = base(n)
				x = v[u, n]; shown = u
				if (u == "sec/op" && x < 1e-3) { x *= 1e6; shown = "µs/op" } else if (u == "sec/op") { shown = "s/op" }
				if (b == "" || b == n) { b = "(baseline)"; r = "-" }
				else if (!((u, b) in v) || v[u, b] == 0) { b = "-"; r = "-" }
				else r = sprintf("%.3f", v[u, n] / v[u, b])
				printf "| %-40s | %-20s | %12.4g | %-36s | %7s |\n", n, shown, x, b, r
			}
		}'
}

for name in overhead amplification recover persist durable freelist soak recover-expired claim purge soak-memory middleware; do
	[ -s "$OUT/$name.txt" ] || continue
	echo
	echo "### $name"
	benchstat "$OUT/$name.txt"
	echo
	ratios "$name"
done | tee "$OUT/report.txt"
if [ -f "$OUT/strace.txt" ]; then
	echo
	echo "### fdatasync/fsync of 2000 lone durable calls (+1 warm-up call and setup)"
	cat "$OUT/strace.txt"
fi | tee -a "$OUT/report.txt"
echo >&2
echo "raw results and report in $OUT" >&2
