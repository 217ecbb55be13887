#!/usr/bin/env bash
# A reader polling the archive in a loop while the daemon serves (issue 12, fresh reads).
# Usage:
#   benches/reader_loop.sh [--duration SECS] [--rate RUNS_PER_S] [--tenants N] [--every K]
#   LOAD_BIN=/path/to/toolwatch benches/reader_loop.sh ...   another build [default:
#                                  ${CARGO_TARGET_DIR:-target}/release/toolwatch; not built here]
# Defaults: --duration 120 --rate 200 --tenants 20 --every 10.
#
# Starts `serve` on its embedded defaults (free ports, fresh data directory), sends RATE agent
# runs a second with `toolwatch loadgen` (fresh ids), and runs `toolwatch trace` (which asks
# the daemon to flush first) back to back for SECS seconds. Every K-th run prints one line:
# seconds since the start, that run's wall time, and the Parquet files in the archive. Each
# flush writes one file per partition with rows, so the file count shows how compaction keeps
# up with a reader in a loop; the wall time shows what that costs the reader. At the end it
# prints the daemon's compaction counters.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=120 rate=200 tenants=20 every=10
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --tenants) tenants=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "reader_loop.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

bin=${LOAD_BIN:-${CARGO_TARGET_DIR:-target}/release/toolwatch}
if [ ! -x "$bin" ]; then
  echo "reader_loop.sh: no binary at $bin: build it (cargo build --release) or set LOAD_BIN" >&2
  exit 2
fi
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

TOOLWATCH_LOG__FORMAT=json "$bin" serve --data-dir "$work/data" \
  --otlp-grpc 127.0.0.1:0 --otlp-http 127.0.0.1:0 --admin 127.0.0.1:0 2> "$work/serve.log" &
pids+=($!)
for _ in $(seq 1 400); do
  grep -q '"toolwatch ready"' "$work/serve.log" 2>/dev/null && break
  sleep 0.05
done
ready=$(grep -m1 '"toolwatch ready"' "$work/serve.log") || {
  echo "reader_loop.sh: toolwatch not ready after 20 s" >&2; exit 1; }
grpc=$(sed -E 's/.*"otlp_grpc":"([^"]+)".*/\1/' <<< "$ready")
admin=$(sed -E 's/.*"admin":"([^"]+)".*/\1/' <<< "$ready")

"$bin" loadgen --target "http://$grpc" --requests 100000000 --tenants "$tenants" \
  --rate "$rate" > /dev/null 2>&1 &
pids+=($!)

echo "seconds  trace_wall_s  parquet_files"
start=$SECONDS n=0
while [ $((SECONDS - start)) -lt "$duration" ]; do
  t0=$(date +%s%N)
  "$bin" trace --data-dir "$work/data" --json no-such-request > /dev/null 2>&1 || true
  t1=$(date +%s%N)
  if [ $((n % every)) = 0 ]; then
    files=$(find "$work/data" -name '*.parquet' -not -path '*/.compact/*' | wc -l)
    printf '%7d  %12.3f  %13d\n' $((SECONDS - start)) "$(bc <<< "scale=3; ($t1 - $t0) / 1000000000")" "$files"
  fi
  n=$((n + 1))
done
curl -s "http://$admin/metrics" | grep '^toolwatch_archive_compaction' || true
