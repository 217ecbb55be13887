#!/usr/bin/env bash
# Scaling benchmark (issue 37): the blast at several daemon core counts, one table. Usage:
#   benches/scaling.sh [--cores "2 4 8 12"] [--duration SECS] [-- extra blast.sh flags]
#   LOAD_BIN=/path/to/toolwatch benches/scaling.sh ...   another build (as blast.sh)
# For each N, `benches/blast.sh --cores N --threads` pins the daemon to cores 0..N-1 and the
# load client to the rest, and measures start to exit. Prints one markdown row per N: spans
# acknowledged per second, written by exit, written per second over the load and the exit, CPU
# s per million written, peak RSS, SIGTERM to exit, and the busiest thread other than the
# receivers with its share of the daemon's CPU. Core counts above the machine's are skipped.
# Each row's JSON line from blast.sh goes to stderr as well, for the record.
set -euo pipefail
cd "$(dirname "$0")/.."

cores="2 4 8 12" duration=20
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --cores) cores=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "scaling.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

all=$(nproc --all)
echo "| daemon cores | acked/s | written by exit | written/s, load + exit | CPU s / M written | peak RSS | SIGTERM → exit | busiest thread (share) |"
echo "|---|---|---|---|---|---|---|---|"
for n in $cores; do
  if [ "$n" -gt "$all" ]; then
    echo "scaling.sh: skipping $n cores (this machine has $all)" >&2
    continue
  fi
  line=$(benches/blast.sh --cores "$n" --threads --duration "$duration" ${extra[@]+"${extra[@]}"} 2>/dev/null | tail -n1)
  echo "$line" >&2
  python3 - "$n" "$line" <<'PY'
import json, sys
n, line = sys.argv[1], sys.argv[2]
r = json.loads(line)
written = "all {:,}".format(r["written_spans"]) if r["all_acked_written"] else "{:,} of {:,}".format(r["written_spans"], r["acked_spans"])
share = r.get("busiest_thread_share")
print(f"| {n} | {r['acked_spans_per_s']:,.0f} | {written} | {r['written_spans_per_s_load_and_exit']:,} | "
      f"{r['cpu_s_per_million_written']} | {r['peak_rss_mib']:,} MiB | {r['shutdown_s']} s | "
      f"{r.get('busiest_thread', '')} ({share:.1%}) |" if share is not None else "|")
PY
done
