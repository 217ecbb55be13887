#!/usr/bin/env bash
# Query latency: `toolwatch query` from start to exit (wall and user+system CPU), seven
# responder-style queries over one archive, builds interleaved, to compare release builds
# (opt-levels, DataFusion features). Usage:
#   benches/query_latency.sh --data-dir DIR [--rounds N] BIN [BIN ...]
# Each BIN is a toolwatch binary; labels are their parent folders' names. An archive to run it
# on, a million spans over 20 tenants (about a minute here):
#   toolwatch serve --data-dir /tmp/qb &   # then
#   toolwatch loadgen --requests 100000 --batch 50 --tenants 20; kill %1
# Prints one line per query and build: median wall and CPU seconds over the rounds, and
# whether every build gave the same rows (a digest of the JSON output).
set -euo pipefail

data="" rounds=3 bins=()
while [ $# -gt 0 ]; do
  case "$1" in
    --data-dir) data=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) bins+=("$1"); shift ;;
  esac
done
if [ -z "$data" ] || [ ${#bins[@]} -eq 0 ]; then
  echo "usage: $0 --data-dir DIR [--rounds N] BIN [BIN ...]" >&2
  exit 2
fi

queries=(
  "SELECT count(*) AS n FROM spans"
  "SELECT tenant, count(*) AS n, count(DISTINCT trace_id) AS traces FROM spans GROUP BY tenant ORDER BY n DESC, tenant"
  "SELECT tool_name, count(*) AS n FROM spans WHERE tool_arguments LIKE '%order 77%' GROUP BY tool_name ORDER BY n DESC, tool_name"
  "SELECT span_class, name, duration_ns FROM spans WHERE request_id = 'req-1-00061464' ORDER BY start_time"
  "SELECT tenant, tool_name, count(*) AS n, avg(duration_ns) AS avg_ns, max(duration_ns) AS max_ns FROM spans WHERE span_class = 'tool' GROUP BY tenant, tool_name ORDER BY n DESC, tenant, tool_name LIMIT 20"
  "SELECT principal_id, sum(input_tokens) AS inp, sum(output_tokens) AS outp, round(sum(cost_usd), 6) AS cost, count(*) AS n FROM requests GROUP BY principal_id ORDER BY cost DESC, principal_id LIMIT 10"
  "SELECT date_trunc('minute', start_time) AS m, count(*) AS n FROM spans WHERE regexp_like(name, '^execute_tool') GROUP BY 1 ORDER BY 1"
)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for r in $(seq "$rounds"); do
  for q in "${!queries[@]}"; do
    for b in "${!bins[@]}"; do
      /usr/bin/time -f "%e %U %S" -o "$work/t" "${bins[$b]}" query --data-dir "$data" \
        --format json "${queries[$q]}" > "$work/out" 2> "$work/err" \
        || { echo "query $((q + 1)) failed with ${bins[$b]}:" >&2; cat "$work/err" >&2; exit 1; }
      read -r wall user sys < "$work/t"
      digest=$(sha256sum < "$work/out" | cut -c1-12)
      echo "$q $b $wall $(echo "$user + $sys" | bc) $digest" >> "$work/times"
    done
  done
done

python3 - "$work/times" "${bins[@]}" <<'EOF'
import collections, os, statistics, sys
rows = collections.defaultdict(list)
digests = collections.defaultdict(set)
for line in open(sys.argv[1]):
    q, b, wall, cpu, digest = line.split()
    rows[(int(q), int(b))].append((float(wall), float(cpu)))
    digests[int(q)].add(digest)
labels = [os.path.basename(os.path.dirname(os.path.abspath(p))) for p in sys.argv[2:]]
for q in sorted(digests):
    cells = []
    for b, label in enumerate(labels):
        runs = rows[(q, b)]
        cells.append(f"{label} wall {statistics.median(r[0] for r in runs):.2f} s "
                     f"cpu {statistics.median(r[1] for r in runs):.2f} s")
    same = "same rows" if len(digests[q]) == 1 else "ROWS DIFFER"
    print(f"q{q + 1}: " + " | ".join(cells) + f" | {same}")
EOF
