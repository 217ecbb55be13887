#!/usr/bin/env bash
# Blast benchmark (issue 12): whole-process CPU of `toolwatch serve` per span WRITTEN, under the
# pre-serialized blast load of `toolwatch loadgen --blast`. Usage:
#   benches/blast.sh [--duration SECS] [--tenants N] [--tenant-on root|every] [--connections N]
#                    [--requests-per-batch N] [--cores N] [--threads] [--keep] [-- extra loadgen flags]
#   LOAD_BIN=/path/to/toolwatch benches/blast.sh ...   another build [default:
#                                  ${CARGO_TARGET_DIR:-target}/release/toolwatch; not built here]
#   LOADGEN_BIN=/path/to/toolwatch benches/blast.sh ...  the load client from another build (to
#                                  measure a daemon older than `loadgen --blast`) [default: LOAD_BIN]
#   LOAD_CONFIG=file.toml benches/blast.sh ...          a configuration file [default: none, the
#                                  embedded defaults; only ports and data dir are set here]
#   PERF_OUT=perf.data benches/blast.sh ...             also sample the daemon with perf, start to exit
#   PERF_CALL_GRAPH="--call-graph dwarf,16384" ...      perf's call-graph option [default: -g,
#                                  frame pointers, which the release build does not keep: use
#                                  dwarf to see callers, and `perf script`, not `perf report`]
# Defaults: --duration 15 --tenants 20 --tenant-on root --connections 2 --requests-per-batch 40.
#
# Starts `serve` under `/usr/bin/time -v` (start to exit) on free ports with a fresh data
# directory, waits for "toolwatch ready", runs the blast (a separate process, its CPU reported
# apart), sends SIGTERM, times SIGTERM -> exit, then counts the span rows in the archive
# (`toolwatch query`) and the Parquet files under spans/. --cores N pins the daemon to cores
# 0..N-1 (taskset) and the load client to the others (where there are none, it shares them);
# `[pipeline] workers` then defaults to N. --threads also samples the daemon's per-thread CPU
# (/proc/PID/task/*/stat, by thread name) just before SIGTERM, and the busiest single thread
# other than the receivers' (tokio-*) as a share of the daemon's CPU then. --keep keeps the
# work directory (data, logs, reports) and prints its path.
# Prints a readable summary on stderr and one JSON line on stdout. Each run also times a fixed
# CPU-bound task that does not depend on toolwatch (SHA-256 of 1 GiB of zeros, `sha256sum`,
# user+system CPU): `calibration_cpu_s`. This machine's speed drifts by up to 2x between hours;
# figures taken hours apart compare only through their calibration.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=15 tenants=20 tenant_on=root connections=2 per_batch=40 threads=0 keep=0 cores=
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --tenants) tenants=$2; shift 2 ;;
    --tenant-on) tenant_on=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --requests-per-batch) per_batch=$2; shift 2 ;;
    --threads) threads=1; shift ;;
    --cores) cores=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "blast.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

bin=${LOAD_BIN:-${CARGO_TARGET_DIR:-target}/release/toolwatch}
if [ ! -x "$bin" ]; then
  echo "blast.sh: no binary at $bin: build it (cargo build --release) or set LOAD_BIN" >&2
  exit 2
fi
work=$(mktemp -d)
if [ "$keep" = 1 ]; then
  trap 'echo "blast.sh: work directory kept: $work" >&2' EXIT
else
  trap 'rm -rf "$work"' EXIT
fi

# --cores N: the daemon on cores 0..N-1, the load client on the rest (or the same, if none).
daemon_pin=() load_pin=()
if [ -n "$cores" ]; then
  all=$(nproc --all)
  if [ "$cores" -lt 1 ] || [ "$cores" -gt "$all" ]; then
    echo "blast.sh: --cores must be 1..$all" >&2; exit 2
  fi
  daemon_pin=(taskset -c "0-$((cores - 1))")
  if [ "$cores" -lt "$all" ]; then
    load_pin=(taskset -c "$cores-$((all - 1))")
  fi
fi

head -c 1G /dev/zero | /usr/bin/time -f "%U %S" -o "$work/calibration.time" sha256sum > /dev/null

TOOLWATCH_LOG__FORMAT=json ${daemon_pin[@]+"${daemon_pin[@]}"} /usr/bin/time -v -o "$work/serve.time" \
  "$bin" serve ${LOAD_CONFIG:+--config "$LOAD_CONFIG"} --data-dir "$work/data" \
  --otlp-grpc 127.0.0.1:0 --otlp-http 127.0.0.1:0 --admin 127.0.0.1:0 2> "$work/serve.log" &
time_pid=$!
for _ in $(seq 1 400); do
  grep -q '"toolwatch ready"' "$work/serve.log" 2>/dev/null && break
  if ! kill -0 "$time_pid" 2>/dev/null; then
    echo "blast.sh: toolwatch exited before it was ready:" >&2
    cat "$work/serve.log" >&2
    exit 1
  fi
  sleep 0.05
done
ready=$(grep -m1 '"toolwatch ready"' "$work/serve.log") || {
  echo "blast.sh: toolwatch not ready after 20 s" >&2; kill -TERM "$time_pid"; exit 1; }
http=$(sed -E 's/.*"otlp_http":"([^"]+)".*/\1/' <<< "$ready")
# The daemon is the child of `time`.
daemon_pid=$(pgrep -P "$time_pid")
# PERF_OUT=file: sample the daemon from here to its exit (perf record -F 499 -g; per thread
# with `perf report --sort comm,sym`).
if [ -n "${PERF_OUT:-}" ]; then
  perf record -q -F 499 ${PERF_CALL_GRAPH:--g} -p "$daemon_pid" -o "$PERF_OUT" 2>/dev/null &
fi

rc=0
${load_pin[@]+"${load_pin[@]}"} /usr/bin/time -v -o "$work/loadgen.time" "${LOADGEN_BIN:-$bin}" loadgen --blast --json --target "http://$http" \
  --duration "$duration" --tenants "$tenants" --tenant-on "$tenant_on" \
  --connections "$connections" --requests-per-batch "$per_batch" ${extra[@]+"${extra[@]}"} \
  > "$work/report.json" || rc=$?
if [ "$rc" != 0 ]; then
  echo "blast.sh: loadgen exited with $rc (its report, if any, is still used)" >&2
fi

if [ "$threads" = 1 ]; then
  # One line per thread: "<name>\t<utime+stime clock ticks>" (the name may hold spaces).
  for stat in /proc/"$daemon_pid"/task/*/stat; do
    line=$(cat "$stat" 2>/dev/null) || continue
    name=${line#*(}; name=${name%)*}
    rest=${line##*) }
    read -r -a f <<< "$rest"
    # After the name: state is field 3 of stat, utime 14 and stime 15, i.e. f[11] and f[12].
    printf '%s\t%s\n' "$name" "$((f[11] + f[12]))"
  done > "$work/threads.tsv"
fi

t0=$(date +%s.%N)
kill -TERM "$daemon_pid"
serve_rc=0
wait "$time_pid" || serve_rc=$?
t1=$(date +%s.%N)
if [ "$serve_rc" != 0 ]; then
  echo "blast.sh: toolwatch exited with $serve_rc; last log lines:" >&2
  tail -5 "$work/serve.log" >&2
fi

"$bin" query --data-dir "$work/data" --format json \
  "SELECT count(*) AS written, count(DISTINCT trace_id || span_id) AS distinct_written, count(*) FILTER (WHERE tenant = 'default') AS default_tenant FROM spans" \
  > "$work/written.json" 2> "$work/query.err" || echo '[]' > "$work/written.json"
files=$(find "$work/data/spans" -name '*.parquet' 2>/dev/null | wc -l)

python3 - "$work" "$t0" "$t1" "$files" "$threads" "$(getconf CLK_TCK)" "$serve_rc" "$cores" <<'PY'
import json, re, sys
work, t0, t1, files, threads, tck, serve_rc, cores = sys.argv[1:]
def time_v(path):
    t = open(path).read()
    f = lambda k: float(re.search(re.escape(k) + r":\s*([\d.:]+)", t).group(1))
    return f("User time (seconds)"), f("System time (seconds)"), int(f("Maximum resident set size (kbytes)"))
try:
    report = json.load(open(f"{work}/report.json"))
except ValueError:
    sys.exit("blast.sh: loadgen wrote no report")
rows = json.load(open(f"{work}/written.json"))
written = rows[0]["written"] if rows else 0
distinct = rows[0]["distinct_written"] if rows else 0
default_tenant = rows[0]["default_tenant"] if rows else 0
if not rows:
    print("blast.sh: counting the archive failed: " + open(f"{work}/query.err").read().strip(), file=sys.stderr)
user, sys_s, rss = time_v(f"{work}/serve.time")
gen_user, gen_sys, _ = time_v(f"{work}/loadgen.time")
stopped = next((json.loads(l) for l in open(f"{work}/serve.log") if '"toolwatch stopped"' in l), {})
cpu = user + sys_s
calibration = sum(float(x) for x in open(f"{work}/calibration.time").read().split()[-2:])
acked = report["spans"]
out = {
    "acked_spans": acked,
    "written_spans": written,
    "distinct_written_spans": distinct,
    "all_acked_written": written == acked and distinct == acked,
    "span_files": int(files),
    "spans_under_default_tenant": default_tenant,
    "daemon_cpu_s": round(cpu, 2),
    "daemon_user_s": user,
    "daemon_sys_s": sys_s,
    "cpu_s_per_million_written": round(cpu / written * 1e6, 1) if written else None,
    "written_spans_per_s_load_and_exit": round(written / (report["seconds"] + float(t1) - float(t0))),
    "daemon_cores": int(cores) if cores else None,
    "peak_rss_mib": round(rss / 1024),
    "calibration_cpu_s": round(calibration, 2),
    "acked_spans_per_s": report["spans_per_s"],
    "load_seconds": report["seconds"],
    "shutdown_s": round(float(t1) - float(t0), 2),
    "daemon_exit_status": int(serve_rc),
    "daemon_span_rows": stopped.get("span_rows"),
    "loadgen_cpu_s": round(gen_user + gen_sys, 2),
    "bytes_per_span": report["bytes_per_span"],
    "refused": report["refused"],
    "tenants": report["tenants"],
    "tenant_on": report["tenant_on"],
    "connections": report["connections"],
    "requests_per_batch": report["requests_per_batch"],
}
if threads == "1":
    per, single = {}, []
    for line in open(f"{work}/threads.tsv"):
        name, ticks = line.rstrip("\n").rsplit("\t", 1)
        per[name] = per.get(name, 0) + int(ticks) / int(tck)
        single.append((int(ticks) / int(tck), name))
    out["threads_cpu_s_before_sigterm"] = {k: round(v, 2) for k, v in sorted(per.items(), key=lambda kv: -kv[1])}
    # The receivers (tokio runtime threads) are many and spread; the question is whether one
    # pipeline thread is the ceiling.
    total = sum(t for t, _ in single)
    busy, name = max(((t, n) for t, n in single if not n.startswith("tokio-")), default=(0, ""))
    out["busiest_thread"] = name
    out["busiest_thread_share"] = round(busy / total, 3) if total else None
e = sys.stderr
print(f"acked {acked:,} spans ({report['spans_per_s']:,.0f}/s over {report['seconds']:.1f} s, "
      f"{report['bytes_per_span']} bytes a span, {report['refused']} refusals); written {written:,} "
      f"({'all' if out['all_acked_written'] else 'NOT all'} acknowledged), {files} Parquet files, "
      f"{default_tenant:,} spans under 'default'", file=e)
per_m = out["cpu_s_per_million_written"]
print(f"daemon CPU {cpu:.1f} s = {per_m if per_m is not None else '-'} CPU s per million spans written; "
      f"peak RSS {out['peak_rss_mib']} MiB; SIGTERM to exit {out['shutdown_s']} s; "
      f"loadgen CPU {out['loadgen_cpu_s']} s (not counted); calibration {out['calibration_cpu_s']} CPU s", file=e)
if threads == "1":
    print("threads before SIGTERM: " + ", ".join(f"{k} {v}" for k, v in out["threads_cpu_s_before_sigterm"].items()), file=e)
    print(f"busiest thread besides the receivers: {out['busiest_thread']}, {out['busiest_thread_share']:.1%} of the daemon's CPU", file=e)
print(f"written per second, load and exit: {out['written_spans_per_s_load_and_exit']:,}", file=e)
print(json.dumps(out))
PY
