#!/usr/bin/env bash
# Instructions the whole daemon spends per span written, for one build or two side by side:
#   benches/daemon_instructions.sh BIN [BIN_B]
# `serve` on the embedded defaults runs under valgrind's callgrind; `loadgen --blast` (native,
# not counted) sends a fixed number of batches ($BATCHES, default 60: 24,000 spans, fresh ids);
# SIGTERM; the archive's span rows are counted. The same run with no batch gives the start-up
# and shutdown cost, subtracted. Counts do not move with the machine's load as CPU seconds do
# (this machine has hours at a third of its speed), so they compare a change's cost; the blast
# (`benches/blast.sh`) stays the figure users read. Kernel work (syscalls, page faults) is not
# counted, and valgrind runs the daemon's threads one at a time, so batching between threads
# (journal commits shared by exports) differs from a native run.
# `SHAPE=small` sends small exports instead: loadgen's default shape, one agent run (~10 spans,
# a log record or so) per OTLP/gRPC export, 4 exports in flight, 40 runs per batch counted; it
# adds instructions per export.
# `DAEMON_CONFIG=FILE` runs the daemon with that configuration file.
# Per thread: `CALLGRIND_KEEP=DIR` keeps the callgrind files (one per thread) for
# `callgrind_annotate`.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is needed" >&2; exit 2; }
[ $# -ge 1 ] || { echo "usage: $0 BIN [BIN_B]" >&2; exit 2; }
batches=${BATCHES:-60}

# BIN BATCHES -> "instructions written_spans"
run() {
  local bin=$1 n=$2 work
  work=$(mktemp -d)
  valgrind --tool=callgrind --separate-threads=yes \
    --callgrind-out-file="$work/cg.out" \
    "$bin" serve ${DAEMON_CONFIG:+--config "$DAEMON_CONFIG"} --data-dir "$work/data" \
    --otlp-grpc 127.0.0.1:0 --otlp-http 127.0.0.1:0 --admin 127.0.0.1:0 \
    > /dev/null 2> "$work/serve.log" &
  local vg=$!
  local ready=
  for _ in $(seq 1 1200); do
    ready=$(grep -m1 'toolwatch ready' "$work/serve.log" 2>/dev/null) && break
    kill -0 "$vg" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
    sleep 0.1
  done
  [ -n "$ready" ] || { echo "not ready after 120 s" >&2; kill "$vg"; exit 1; }
  local http
  http=$(grep -oE 'otlp_http[^0-9]*[0-9.]+:[0-9]+' <<< "$ready" | grep -oE '[0-9.]+:[0-9]+$')
  if [ "$n" -gt 0 ] && [ "${SHAPE:-blast}" = small ]; then
    local grpc
    grpc=$(grep -oE 'otlp_grpc[^0-9]*[0-9.]+:[0-9]+' <<< "$ready" | grep -oE '[0-9.]+:[0-9]+$')
    "$bin" loadgen --target "http://$grpc" --requests $((n * 40)) --tenants 20 \
      --concurrency 4 > "$work/report.txt"
  elif [ "$n" -gt 0 ]; then
    "$bin" loadgen --blast --json --target "http://$http" --batches "$n" --tenants 20 \
      --tenant-on root --connections 2 > "$work/report.json"
  fi
  kill -TERM "$vg"
  wait "$vg" || true
  local ir=0
  for f in "$work"/cg.out*; do
    local n_f
    n_f=$(sed -n 's/^summary: \([0-9]*\).*/\1/p' "$f" | head -1)
    ir=$(( ir + ${n_f:-0} ))
  done
  local written=0 bytes=0
  if [ "$n" -gt 0 ]; then
    written=$("$bin" query --data-dir "$work/data" --format csv "SELECT count(*) FROM spans" | tail -1)
    bytes=$(find "$work/data/spans" -name '*.parquet' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  fi
  if [ -n "${CALLGRIND_KEEP:-}" ] && [ "$n" -gt 0 ]; then
    mkdir -p "$CALLGRIND_KEEP/$(basename "$bin")"
    cp "$work"/cg.out* "$CALLGRIND_KEEP/$(basename "$bin")/"
  fi
  rm -rf "$work"
  echo "$ir $written $bytes"
}

exports=$((batches * 40))
[ "${SHAPE:-blast}" = small ] || exports=$batches
printf 'build\tspans written\tM instructions (load, less start-up)\tinstructions / span\tinstructions / export\tstart-up and exit (M)\tspan files (bytes)\n'
for bin in "$@"; do
  read -r base _ _ < <(run "$bin" 0)
  read -r total written bytes < <(run "$bin" "$batches")
  printf '%s\t%d\t%d\t%d\t%d\t%d\t%d\n' "$bin" "$written" $(( (total - base) / 1000000 )) \
    $(( (total - base) / (written > 0 ? written : 1) )) $(( (total - base) / exports )) \
    $(( base / 1000000 )) "$bytes"
done
