#!/usr/bin/env bash
# Load benchmark: `toolwatch loadgen` at full speed into `toolwatch serve` (release build),
# reporting what the receiver alone spent. Usage:
#   benches/load.sh [loadgen flags...]      e.g. benches/load.sh --requests 40000 --batch 50
#   LOAD_CONFIG=benches/budgets.toml benches/load.sh ...   with a configuration file
#   LOAD_BIN=/path/to/toolwatch benches/load.sh ...   another build (e.g. an older commit's)
# Prints: spans archived, wall time, sustained spans/s, the daemon's CPU seconds (user+sys)
# per million acknowledged spans, and the daemon's peak RSS. The load generator runs as a
# separate process; its CPU is reported separately and not counted for the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${LOAD_BIN:-}" ]; then cargo build --release --quiet; fi
bin=${LOAD_BIN:-${CARGO_TARGET_DIR:-target}/release/toolwatch}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

TOOLWATCH_LOG__FORMAT=json /usr/bin/time -v -o "$work/serve.time" \
  "$bin" serve ${LOAD_CONFIG:+--config "$LOAD_CONFIG"} --data-dir "$work/data" --otlp-grpc 127.0.0.1:0 --otlp-http 127.0.0.1:0 \
  --admin 127.0.0.1:0 2> "$work/serve.log" &
serve_pid=$!
for _ in $(seq 1 200); do
  grep -q '"toolwatch ready"' "$work/serve.log" 2>/dev/null && break
  sleep 0.05
done
grpc=$(grep '"toolwatch ready"' "$work/serve.log" | sed -E 's/.*"otlp_grpc":"([^"]+)".*/\1/')
http=$(grep '"toolwatch ready"' "$work/serve.log" | sed -E 's/.*"otlp_http":"([^"]+)".*/\1/')
target="http://$grpc"
for a in "$@"; do [ "$a" = "--http" ] && target="http://$http"; done

admin=$(grep '"toolwatch ready"' "$work/serve.log" | sed -E 's/.*"admin":"([^"]+)".*/\1/')
/usr/bin/time -v -o "$work/loadgen.time" "$bin" loadgen --target "$target" --json "$@" > "$work/report.json"
# The journal's work (absent from builds before the journal).
curl -s "http://$admin/metrics" | grep -E '^toolwatch_journal_(records|commits)_total|^toolwatch_otlp_rejected' > "$work/skipped" || true
# The daemon's pid is the child of `time`.
kill -TERM "$(pgrep -P "$serve_pid" toolwatch)"
wait "$serve_pid"

python3 - "$work" <<'PY'
import json, re, sys
work = sys.argv[1]
def time_v(path):
    t = open(path).read()
    f = lambda k: float(re.search(re.escape(k) + r":\s*([\d.]+)", t).group(1))
    return f("User time (seconds)") + f("System time (seconds)"), int(f("Maximum resident set size (kbytes)"))
report = json.load(open(f"{work}/report.json"))
stopped = [json.loads(l) for l in open(f"{work}/serve.log") if '"toolwatch stopped"' in l][0]
cpu, rss = time_v(f"{work}/serve.time")
gen_cpu, _ = time_v(f"{work}/loadgen.time")
spans = report["spans"]
secs = report["elapsed_ms"] / 1000
assert stopped["span_rows"] == spans, (stopped, spans)
print(f"spans acknowledged {spans}, archived {stopped['span_rows']}, log records {stopped['log_rows']}, request summaries {stopped.get('request_rows', 0)} (of {report['requests']} requests)")
print(f"protobuf bytes {report['bytes']} ({report['bytes'] / spans:.0f} bytes/span), exports {report['exports']}, retries {report['retries']}")
print(f"wall {secs:.1f} s, {spans / secs:,.0f} spans/s sustained")
print(f"daemon CPU {cpu:.1f} s = {cpu / spans * 1e6:.1f} CPU s per million spans; peak RSS {rss / 1024:.0f} MiB")
print(f"loadgen CPU {gen_cpu:.1f} s (not counted above)")
print(f"alarms raised {stopped.get('alarms', 0)}, alarm rows {stopped.get('alarm_rows', 0)}; " + "; ".join(l.strip() for l in open(f"{work}/skipped")))
PY
