# A tiny TAP emitter for the integration tests (sourced).
#   check DESC CMD...          ok when CMD succeeds
#   is GOT WANT DESC           ok when GOT == WANT
#   like GOT REGEX DESC        ok when GOT matches the extended regex
#   unlike GOT REGEX DESC
#   wait_for SECONDS DESC CMD...   polls CMD every 0.2 s until it succeeds (not a
#                              timing assertion: the bound only stops a hung test)
TAP_N=0
TAP_FAILED=0
_tap() { # status desc [diag]
  TAP_N=$((TAP_N + 1))
  if [[ $1 == 0 ]]; then echo "ok $TAP_N - $2"; else
    echo "not ok $TAP_N - $2"; TAP_FAILED=$((TAP_FAILED + 1))
    [[ -n "${3:-}" ]] && printf '%s\n' "$3" | sed 's/^/#   /'
  fi
  return 0
}
check() { local d=$1; shift; "$@" >/dev/null 2>&1; _tap $? "$d" "command: $*"; }
is() { [[ "$1" == "$2" ]]; _tap $? "$3" "got:  '$1'
want: '$2'"; }
like() { [[ "$1" =~ $2 ]]; _tap $? "$3" "got:  '$1'
want match: $2"; }
unlike() { ! [[ "$1" =~ $2 ]]; _tap $? "$3" "got:  '$1'
must not match: $2"; }
wait_for() {
  local limit=$1 d=$2; shift 2
  local end=$((SECONDS + limit))
  while ((SECONDS < end)); do "$@" >/dev/null 2>&1 && { _tap 0 "$d"; return 0; }; sleep 0.2; done
  _tap 1 "$d" "still false after ${limit}s: $*"; return 1
}
done_testing() { echo "1..$TAP_N"; ((TAP_FAILED == 0)); }
# SQL against the test database, as the test user: sql "SELECT ..." → tab-separated rows
sql() {
  local url=${OOPS_TEST_DB#mysql://}; local cred=${url%%@*}; local rest=${url#*@}
  local hostport=${rest%%/*}; local db=${rest#*/}; db=${db%%\?*} # without the URL's options
  # The password in MYSQL_PWD (this client's environment), never in argv: ps shows argv to every user.
  # The URL has none (issue 34): it is in the file OOPS_DB_PASSWORD_FILE names.
  local pw=${cred#*:}
  [[ $cred == *:* ]] || pw=$(cat "${OOPS_DB_PASSWORD_FILE:?}")
  MYSQL_PWD=$pw mariadb --no-defaults -N -B -h"${hostport%%:*}" -P"${hostport##*:}" -u"${cred%%:*}" "$db" -e "$1"
}
export -f sql

# not_under_sanitizers WHY: a test with nothing for ASan/UBSan to watch (no C
# of ours runs in it, or it builds its own tree) runs in the normal pass only;
# in the sanitizer pass (OOPS_BUILD configured with OOPS_SANITIZE=ON) it
# reports one skip saying so, and the script ends.
not_under_sanitizers() {
  if grep -qs '^OOPS_SANITIZE:BOOL=ON$' "${OOPS_BUILD:-.}/CMakeCache.txt"; then
    echo "ok 1 # SKIP $1: run in the normal pass only"
    echo "1..1"
    exit 0
  fi
}
