#!/usr/bin/env bash
# Query latency: `toolwatch query` from start to exit (wall and user+system CPU, GNU time),
# seven responder-style queries over one archive, builds interleaved, to compare release
# builds (opt-levels, DataFusion features). Usage:
#   benches/query_latency.sh --data-dir DIR [--rounds N] [LABEL=]BIN [[LABEL=]BIN ...]
# Each BIN is a toolwatch binary, labelled LABEL (default: its path). The files are read as
# they are on disk (`--no-flush`): run it on an archive no daemon is writing. An archive to
# run it on, a million spans over 20 tenants (about a minute here):
#   toolwatch serve --data-dir /tmp/qb &
#   toolwatch loadgen --requests 100000 --batch 50 --tenants 20; kill %1
#   benches/query_latency.sh --data-dir /tmp/qb --rounds 7 old=../old/toolwatch new=target/release/toolwatch
# Prints one line per query: each build's median wall and CPU seconds over the rounds, and
# whether every build gave the same rows (a digest of the JSON output).
set -euo pipefail

usage() {
  echo "usage: $0 --data-dir DIR [--rounds N] [LABEL=]BIN [[LABEL=]BIN ...]" >&2
  exit 2
}

data="" rounds=3 labels=() bins=()
while [ $# -gt 0 ]; do
  case "$1" in
    --data-dir|--rounds)
      [ $# -ge 2 ] || usage
      if [ "$1" = --data-dir ]; then data=$2; else rounds=$2; fi
      shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "unknown option $1" >&2; usage ;;
    *=*) labels+=("${1%%=*}"); bins+=("${1#*=}"); shift ;;
    *) labels+=("$1"); bins+=("$1"); shift ;;
  esac
done
[ -n "$data" ] && [ ${#bins[@]} -gt 0 ] || usage
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "--rounds wants a positive integer, not $rounds" >&2; exit 2; }
[ -d "$data" ] || { echo "no archive at $data" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs GNU time at /usr/bin/time" >&2; exit 2; }
for b in "${bins[@]}"; do
  [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 2; }
done

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
: > "$work/times"
for _ in $(seq "$rounds"); do
  for q in "${!queries[@]}"; do
    for b in "${!bins[@]}"; do
      /usr/bin/time -f "%e %U %S" -o "$work/t" "${bins[$b]}" query --data-dir "$data" \
        --no-flush --format json "${queries[$q]}" > "$work/out" 2> "$work/err" \
        || { echo "query $((q + 1)) failed with ${bins[$b]}:" >&2; cat "$work/err" >&2; exit 1; }
      echo "$q $b $(cat "$work/t") $(sha256sum < "$work/out" | cut -c1-12)" >> "$work/times"
    done
  done
done

python3 - "$work/times" "${labels[@]}" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(list)
digests = collections.defaultdict(set)
for line in open(sys.argv[1]):
    q, b, wall, user, system, digest = line.split()
    runs[(int(q), int(b))].append((float(wall), float(user) + float(system)))
    digests[int(q)].add(digest)
labels = sys.argv[2:]
for q in sorted(digests):
    cells = []
    for b, label in enumerate(labels):
        rs = runs[(q, b)]
        cells.append(f"{label} wall {statistics.median(r[0] for r in rs):.2f} s "
                     f"cpu {statistics.median(r[1] for r in rs):.2f} s")
    same = "same rows" if len(digests[q]) == 1 else "ROWS DIFFER"
    print(f"q{q + 1}: " + " | ".join(cells) + f" | {same}")
EOF
