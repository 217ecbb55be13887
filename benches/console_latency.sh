#!/usr/bin/env bash
# Console latency: how long the console's pages take to answer over one archive, as a
# browser would wait for them (curl's time to the last byte), through `toolwatch console`
# (the same handlers `serve` mounts on its admin listener). Usage:
#   benches/console_latency.sh --data-dir DIR [--rounds N] BIN
# BIN is a release toolwatch binary. The archive is read as it is on disk: run it on one no
# daemon is writing. An archive to run it on, a million spans over 20 tenants:
#   toolwatch serve --data-dir /tmp/qb &
#   toolwatch loadgen --requests 100000 --batch 50 --tenants 20 --profile faults; kill %1
# Prints one line per page: median, fastest and slowest seconds over the rounds (the first
# answer of each page, with the page cache warm but DataFusion's own state fresh per answer:
# every page opens a new session).
set -euo pipefail

usage() {
  echo "usage: $0 --data-dir DIR [--rounds N] BIN" >&2
  exit 2
}

data="" rounds=7 bin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --data-dir|--rounds)
      [ $# -ge 2 ] || usage
      if [ "$1" = --data-dir ]; then data=$2; else rounds=$2; fi
      shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "unknown option $1" >&2; usage ;;
    *) bin=$1; shift ;;
  esac
done
[ -n "$data" ] && [ -n "$bin" ] || usage
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "--rounds wants a positive integer, not $rounds" >&2; exit 2; }
[ -d "$data" ] || { echo "no archive at $data" >&2; exit 2; }
[ -x "$bin" ] || { echo "not an executable: $bin" >&2; exit 2; }
command -v curl >/dev/null || { echo "needs curl" >&2; exit 2; }

work=$(mktemp -d)
"$bin" console --data-dir "$data" --listen 127.0.0.1:0 2> "$work/err" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
base=""
for _ in $(seq 100); do
  base=$(sed -n 's|^toolwatch console: \(http://[^/]*\)/ui/$|\1|p' "$work/err")
  [ -n "$base" ] && break
  sleep 0.1
done
[ -n "$base" ] || { echo "the console did not start:" >&2; cat "$work/err" >&2; exit 1; }

# Page 21, by following each page's "Older" link; a request and a tenant from it.
deep="/ui/"
for _ in $(seq 20); do
  deep=$(curl -sf "$base$deep" | grep -o '<a rel="next" href="[^"]*"' | cut -d'"' -f4 | sed 's/&amp;/\&/g')
  [ -n "$deep" ] || { echo "the archive has fewer than 21 pages of requests" >&2; exit 1; }
done
first=$(curl -sf "$base$deep" | grep -o 'href="/ui/requests/[^"]*"' | head -n1 | cut -d'"' -f2)
[ -n "$first" ] || { echo "no request on page 21 of the archive" >&2; exit 1; }
tenant=$(echo "$first" | cut -d/ -f4)
pages=(
  "/ui/"
  "/ui/?tenant=$tenant"
  "/ui/?tenant=$tenant&since=2000-01-01&findings=1"
  "/ui/?findings=1"
  "/ui/?outcome=ok&since=7d"
  "$deep"
  "$first"
  "/ui/findings"
  "/ui/alarms"
)
: > "$work/times"
for _ in $(seq "$rounds"); do
  for p in "${!pages[@]}"; do
    t=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' "$base${pages[$p]}")
    [ "${t%% *}" = 200 ] || { echo "${pages[$p]} answered ${t%% *}" >&2; exit 1; }
    echo "$p ${t#* }" >> "$work/times"
  done
done
printf '%-60s %8s %8s %8s\n' page median fastest slowest
for p in "${!pages[@]}"; do
  awk -v p="$p" '$1 == p { print $2 }' "$work/times" | sort -n > "$work/one"
  n=$(wc -l < "$work/one")
  printf '%-60s %8.3f %8.3f %8.3f\n' "${pages[$p]}" \
    "$(sed -n "$(( (n + 1) / 2 ))p" "$work/one")" "$(head -n1 "$work/one")" "$(tail -n1 "$work/one")"
done
