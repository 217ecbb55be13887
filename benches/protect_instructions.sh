#!/usr/bin/env bash
# Instructions protect spends on five fixed inputs, for one build or two side by side:
#   benches/protect_instructions.sh BIN [BIN_B]
# Counts come from valgrind's callgrind (`toolwatch redact FILE`, less the same run on an
# empty file: start-up and rule compilation), so they do not move with the machine's load as
# criterion's MiB/s do; use it to compare a change's cost, criterion for absolute speed.
# Inputs (written once to $INPUTS, default target/protect-inputs; fixed seed):
#   corpus_mix    the shared corpora's gitleaks and CredSweeper lines, eight to a JSON document
#   orders        6,000 order records (addresses with "zip", "login" keys), no secret
#   orders_secret the same, a secret (e-mail, phone, OpenAI key, card, GitHub token) in a quarter
#   languages     4,000 chat messages in nine languages and scripts, no secret
#   tool_calls    2,000 tool calls whose arguments are a ~512-byte JSON document in a string,
#                 a secret in each: the cost paid per document
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is needed" >&2; exit 2; }
[ $# -ge 1 ] || { echo "usage: $0 BIN [BIN_B]" >&2; exit 2; }
INPUTS=${INPUTS:-target/protect-inputs}
python3 benches/make_protect_inputs.py "$INPUTS" ../shared/corpora
count() { # BIN FILE -> instructions
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$1" redact "$2" 2>&1 >/dev/null \
    | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
: > "$INPUTS/empty"
printf 'input'
for bin in "$@"; do printf '\t%s (M instructions)' "$bin"; done
printf '\n'
declare -A base
for bin in "$@"; do base[$bin]=$(count "$bin" "$INPUTS/empty"); done
for input in corpus_mix orders orders_secret languages tool_calls; do
  printf '%s' "$input"
  for bin in "$@"; do
    n=$(count "$bin" "$INPUTS/$input")
    printf '\t%d' $(( (n - base[$bin]) / 1000000 ))
  done
  printf '\n'
done
printf 'start-up'
for bin in "$@"; do printf '\t%d' $(( base[$bin] / 1000000 )); done
printf '\n'
