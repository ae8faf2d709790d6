# oopsctl chaos (issue 25) in CI: short seeded campaigns (a fixed list of
# seeds, 30 s of faults and workload each, 3 servers) must end with no
# violation and the one summary line; the same seed plans the same faults;
# bad flags are refused in one line with exit 2. Long campaigns are bench's
# (bench/chaos.sh, results in bench/README.md).
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
not_under_sanitizers "campaigns of real servers for minutes; the sanitizers watch the same code in every other test"
ctl=$OOPS_BUILD/oopsctl
work=$(mktemp -d "$OOPS_TEST_WORK/chaos.XXXXXX")
SEEDS=${OOPS_CHAOS_SEEDS:-"11 12"}
DURATION=${OOPS_CHAOS_DURATION:-30s}

for seed in $SEEDS; do
  out=$(TMPDIR=$work "$ctl" chaos --seed "$seed" --duration "$DURATION" --servers 3 2>"$work/err.$seed")
  rc=$?
  last=$(printf '%s\n' "$out" | tail -n 1)
  like "$last" "^chaos: seed $seed, [0-9]+ faults \(kinds: [a-z_, ]+\), [0-9]+ pipelines, [0-9]+ violations$" \
    "seed $seed: the campaign ends with its one summary line"
  is "$rc" 0 "seed $seed: no violation (exit 0)"
  ((rc == 0)) || { printf '%s\n' "$out" | grep -A8 '^violation' | head -60 | sed 's/^/#   /'; sed 's/^/#   /' "$work/err.$seed" | tail -5; }
  printf '%s\n' "$out" | grep '^fault ' >"$work/plan.$seed"
  # Canaries (issue 38): every other application of the campaign's own policy
  # is one, analysed against a real Prometheus; a quarter of them are bad.
  like "$(printf '%s\n' "$out" | grep '^canaries: ')" \
    '^canaries: [1-9][0-9]* began their steps \(analyses against Prometheus\): [0-9]+ promoted, [0-9]+ aborted; ' \
    "seed $seed: canaries began their steps, analysed against a real Prometheus"
  # Approvals (issue 39): a third of the applications' prod releases wait for two.
  like "$(printf '%s\n' "$out" | grep '^approvals: ')" '^approvals: [1-9][0-9]* given to [1-9][0-9]* releases, ' \
    "seed $seed: releases were approved, checked by the approvals rules"
  [[ -s $work/plan.$seed ]]; _tap $? "seed $seed: its planned faults are printed (fault +T KIND ...)"
done

# An operator's policy (tests/fixtures/chaos_policies: the exec gateway, a
# Prometheus probe, a webhook and a notify command, none of which may be
# used) runs under oopsd --simulate: the campaign passes and nothing of it ran.
out=$(TMPDIR=$work "$ctl" chaos --policies "$OOPS_ROOT/tests/fixtures/chaos_policies" --seed 21 --duration 20s \
  --servers 2 --keep "$work/kept" 2>&1)
rc=$?
is "$rc" 0 "an operator's exec-gateway policy under --policies: no violation"
((rc == 0)) || printf '%s\n' "$out" | tail -20 | sed 's/^/#   /'
logs=$(cat "$work"/kept/chaos-seed21-*/s1.log 2>/dev/null)
like "$logs" 'simulating \(--simulate\): the simulated gateway' "  its servers said they simulate"
unlike "$logs" 'build started \(pid|build submitted: job|msg="exec:|127\.0\.0\.1:9' \
  "  and ran none of its commands, asked none of its addresses"
like "$(printf '%s\n' "$out" | tail -n 1)" ', [1-9][0-9]* pipelines, 0 violations$' "  with pipelines of its applications"
# Reachable by us alone (issue 34): the kept campaign is private, the receiver's hook path holds a
# secret of its own, which went to the servers in their environment, not in argv.
kept=$(ls -d "$work"/kept/chaos-seed21-*)
is "$(stat -c %a "$kept")" 700 "  the kept campaign's directory is private (0700)"
like "$(cat "$kept/receiver.port")" '^[0-9]+ [0-9a-f]{32}$' "  the receiver's port file holds its port and a 128-bit secret"
like "$logs" "every notification a webhook to http://[0-9.]+:[0-9]+/\*\*\*;" "  the servers got the receiver's URL (said masked)"

# The receiver alone: a POST to any path but its secret one is 404 and recorded nowhere.
rw=$(mktemp -d "$work/receiver.XXXXXX")
"$OOPS_BUILD/oopsd" lua "$OOPS_ROOT/lua/oops/chaos/receiver.lua" 127.0.0.1 "$rw/log" "$rw/port" "$rw/fail" &
rpid=$!
wait_for 15 "the campaign's receiver starts" test -s "$rw/port"
read -r rport rsecret <"$rw/port"
post_to() { printf 'url = "http://127.0.0.1:%s%s"\n' "$rport" "$1" |
  curl -s -m 5 -o /dev/null -w '%{http_code}' -K - -X POST -H 'X-Oops-Event-Id: forged' -d '{}'; }
is "$(post_to /hook)" 404 "  a POST to /hook without the secret: 404"
other=${rsecret%?}0; [[ $other == "$rsecret" ]] && other=${rsecret%?}1
is "$(post_to "/hook/$other")" 404 "  ... with another secret: 404"
is "$(wc -c <"$rw/log")" 0 "  ... and neither is recorded"
is "$(post_to "/hook/$rsecret")" 200 "  with its secret: 200 (the secret given on curl's stdin, not in argv)"
like "$(cat "$rw/log")" '"id":"forged"' "  ... recorded"
kill "$rpid"; wait "$rpid" 2>/dev/null

# The plan comes from the seed alone: --dry-run (which starts nothing)
# prints the same faults, line for line.
first=${SEEDS%% *}
out=$("$ctl" chaos --seed "$first" --duration "$DURATION" --servers 3 --dry-run 2>&1 | grep '^fault ')
is "$out" "$(cat "$work/plan.$first")" "seed $first: --dry-run plans the same faults, line for line"

out=$("$ctl" chaos --seed x --duration 1m 2>&1); rc=$?
is "$rc" 2 "--seed x: exit 2"
like "$(printf '%s\n' "$out" | head -n 1)" '^oopsctl chaos: --seed "x": a whole number' "--seed x: said in one line"
out=$("$ctl" chaos --seed 1 --duration 2s 2>&1); rc=$?
is "$rc" 2 "--duration 2s (below 10s): exit 2"
out=$("$ctl" chaos --seed 1 --duration 1m --servers 1 2>&1); rc=$?
is "$rc" 2 "--servers 1: exit 2"
out=$("$ctl" chaos --seed 1 --duration 1m --targets 1 2>&1); rc=$?
is "$rc" 2 "--targets 1: exit 2"
like "$(printf '%s\n' "$out" | head -n 1)" '^oopsctl chaos: --targets "1": 2 to 400$' "  said in one line"
out=$("$ctl" chaos --seed 1 --duration 1m --targets 5x 2>&1); rc=$?
is "$rc" 2 "--targets 5x: exit 2"
out=$("$ctl" chaos --seed 1 --duration 1m --targets 8 --policies "$OOPS_ROOT/tests/fixtures/chaos_policies" 2>&1); rc=$?
is "$rc" 2 "--targets with --policies (whose applications are the operator's): exit 2"
# --targets N: N applications and environments in the plan's workload.
out=$("$ctl" chaos --seed 5 --duration 2m --targets 7 --dry-run 2>&1)
like "$(printf '%s\n' "$out" | head -n 1)" '^chaos: seed 5, 120s, 4 servers, 7 targets, ' \
  "--targets 7 --dry-run: the plan spans 7 targets"
out=$("$ctl" chaos --seed 5 --duration 2m --dry-run 2>&1)
like "$(printf '%s\n' "$out" | head -n 1)" '^chaos: seed 5, 120s, 4 servers, 40 targets, ' "  and 40 by default"
out=$("$ctl" chaos --seed 1 --duration 1m --policies /nonexistent 2>&1); rc=$?
is "$rc" 2 "--policies of a missing directory: exit 2"
like "$out" "/nonexistent: not a directory" "  and it says which directory"
done_testing
