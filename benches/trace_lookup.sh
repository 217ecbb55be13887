#!/usr/bin/env bash
# How fast `toolwatch trace` finds one request in a large archive. Usage:
#   benches/trace_lookup.sh [REQUESTS] [DATA_DIR]
# Builds the release binary; if DATA_DIR has no archive yet, fills it with REQUESTS loadgen
# agent runs (about 12 spans each; the default 420,000 runs give about 5 million spans) through
# `toolwatch serve`. Then times, with the page cache warm and (where possible) cold:
#   - `toolwatch trace REQUEST_ID` for the first, a middle and the last request;
#   - `toolwatch trace TRACE_ID` for the middle request;
#   - a query that must scan every span's tool arguments, for comparison.
# The archive is kept (delete DATA_DIR yourself); rerunning reuses it.
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-420000}
data=${2:-/tmp/toolwatch-trace-bench}
seed=9
cargo build --release --quiet
bin=$(realpath "${CARGO_TARGET_DIR:-target}")/release/toolwatch

if [ ! -d "$data/spans" ]; then
  mkdir -p "$data"
  TOOLWATCH_LOG__FORMAT=json "$bin" serve --data-dir "$data" --otlp-grpc 127.0.0.1:0 \
    --otlp-http 127.0.0.1:0 --admin 127.0.0.1:0 2> "$data/serve.log" &
  serve_pid=$!
  for _ in $(seq 1 200); do
    grep -q '"toolwatch ready"' "$data/serve.log" 2>/dev/null && break
    sleep 0.05
  done
  grpc=$(grep '"toolwatch ready"' "$data/serve.log" | sed -E 's/.*"otlp_grpc":"([^"]+)".*/\1/')
  "$bin" loadgen --target "http://$grpc" --requests "$requests" --batch 50 --concurrency 4 \
    --tenants 3 --seed "$seed" --json > "$data/loadgen.json"
  kill -TERM "$serve_pid"
  wait "$serve_pid"
fi

spans=$("$bin" query --data-dir "$data" --format csv "SELECT count(*) AS n FROM spans" | tail -1)
files=$(find "$data/spans" -name '*.parquet' | wc -l)
bytes=$(du -sb "$data/spans" | cut -f1)
echo "archive: $spans spans in $files files, $((bytes / 1024 / 1024)) MiB under spans/"

last=$(printf '%08d' $((requests - 1)))
middle=$(printf '%08d' $((requests / 2)))
trace_id=$("$bin" query --data-dir "$data" --format csv \
  "SELECT trace_id FROM spans WHERE request_id = 'req-$seed-$middle' LIMIT 1" | tail -1)

time_it() {
  local what=$1
  shift
  local start end
  start=$(date +%s.%N)
  "$@" > /dev/null
  end=$(date +%s.%N)
  python3 -c "print(f'{\"$what\":<48} {$end - $start:6.3f} s')"
}

for round in 1 2; do
  echo "round $round"
  time_it "trace req-$seed-00000000" "$bin" trace --data-dir "$data" "req-$seed-00000000"
  time_it "trace req-$seed-$middle" "$bin" trace --data-dir "$data" "req-$seed-$middle"
  time_it "trace req-$seed-$last" "$bin" trace --data-dir "$data" "req-$seed-$last"
  time_it "trace $trace_id (trace id)" "$bin" trace --data-dir "$data" "$trace_id"
  time_it "full scan: tool_arguments LIKE" "$bin" query --data-dir "$data" \
    "SELECT count(*) FROM spans WHERE tool_arguments LIKE '%ORD-1234567%'"
done
