#!/usr/bin/env bash
# Long chaos campaigns (issue 25): oopsctl chaos over consecutive seeds until
# TOTAL has passed, then one summary — campaigns, hours, faults by kind,
# pipelines, violations, and the seeds that found any (their work
# directories kept under the results directory, to replay:
# `oopsctl chaos --seed N --duration D`).
#   bench/chaos.sh BUILD_DIR TOTAL [FIRST_SEED [DURATION [SERVERS]]]
#   bench/chaos.sh build 1h 1000 3m 4
set -uo pipefail
build=$(cd "${1:?usage: bench/chaos.sh BUILD_DIR TOTAL [FIRST_SEED [DURATION [SERVERS]]]}" && pwd)
total=${2:?TOTAL, like 1h or 20m}
seed=${3:-1000}
duration=${4:-3m}
servers=${5:-4}
secs() { # 1h30m, 20m, 90s -> seconds
  local s=$1 n=0
  while [[ $s =~ ^([0-9]+)([hms])(.*)$ ]]; do
    case ${BASH_REMATCH[2]} in h) n=$((n + BASH_REMATCH[1] * 3600));; m) n=$((n + BASH_REMATCH[1] * 60));;
      s) n=$((n + BASH_REMATCH[1]));; esac
    s=${BASH_REMATCH[3]}
  done
  [[ -z $s ]] || { echo "bad duration $1" >&2; exit 2; }
  echo "$n"
}
limit=$(secs "$total")
out=${OOPS_CHAOS_RESULTS:-$(dirname "$0")/results/chaos-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
start=$SECONDS campaigns=0 failed=0 pipelines=0 violations=0 bad_seeds=()
declare -A kinds=()
while ((SECONDS - start < limit)); do
  log="$out/seed-$seed.txt"
  "$build/oopsctl" chaos --seed "$seed" --duration "$duration" --servers "$servers" --keep "$out/kept" >"$log" 2>&1
  rc=$?
  campaigns=$((campaigns + 1))
  line=$(grep -E '^chaos: seed [0-9]+, [0-9]+ faults' "$log" | tail -n 1)
  if [[ $line =~ ,\ ([0-9]+)\ pipelines,\ ([0-9]+)\ violations$ ]]; then
    pipelines=$((pipelines + BASH_REMATCH[1])); violations=$((violations + BASH_REMATCH[2]))
  fi
  by=$(grep -E '^faults by kind: ' "$log" | tail -n 1 | sed -E 's/^faults by kind: ([^;]*);.*/\1/')
  IFS=',' read -ra parts <<<"$by"
  for p in "${parts[@]}"; do
    p=${p# }; k=${p% *}; n=${p##* }
    [[ $n =~ ^[0-9]+$ ]] && kinds[$k]=$(( ${kinds[$k]:-0} + n ))
  done
  if ((rc != 0)); then failed=$((failed + 1)); bad_seeds+=("$seed"); else
    rm -rf "$out/kept"/chaos-seed"$seed"-*; fi
  echo "seed $seed: exit $rc: ${line:-no summary line}"
  seed=$((seed + 1))
done
faults=0 list=""
for k in $(printf '%s\n' "${!kinds[@]}" | sort); do faults=$((faults + kinds[$k])); list+="$k ${kinds[$k]}, "; done
hours=$(awk -v s=$((SECONDS - start)) 'BEGIN { printf "%.2f", s / 3600 }')
{
  echo "campaigns: $campaigns ($duration of faults each, $servers servers), ${hours} h in all"
  echo "faults: $faults (${list%, })"
  echo "pipelines: $pipelines"
  echo "violations: $violations in $failed campaigns${bad_seeds:+ (seeds: ${bad_seeds[*]})}"
} | tee "$out/summary.txt"
