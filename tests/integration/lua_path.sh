# Lua modules are never loaded from the current directory (issue 22): a
# cjson.lua, lfs.lua or oops/engine.lua planted where oopsd or oopsctl is
# started is not run by `oopsd --check`, a server, `oopsctl create --policies`
# nor `oopsd lua` — also with LUA_PATH/LUA_CPATH naming relative entries.
# Each planted file would write a marker; the test asserts none appears. A
# relative $OOPS_LUA_DIR is refused, and so is an installed copy
# (PREFIX/share/oopsd/lua) that someone but its owner may write to: one line
# naming the directory, never a quiet fall-back to the source tree.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
work=$(mktemp -d "${OOPS_TEST_WORK:-/tmp}/lua_path.XXXXXX")
trap 'stop_servers; rm -rf "$work"' EXIT
unset OOPS_LUA_DIR
marks="$work/marks" plant="$work/cwd" pol="$work/policies"
mkdir -p "$marks" "$plant/oops/policy" "$pol"
cp "$OOPS_ROOT/tests/fixtures/policies/fast/oopsd.lua" "$pol/"
printf 'application "shop/web" { environments = { "prod" } }\n' >"$pol/apps.lua"

# A module that, if ever loaded, leaves $marks/NAME behind and breaks the caller.
planted() { # FILE NAME
  printf 'local f = io.open([[%s]], "w"); f:write("ran"); f:close()\nerror("planted %s ran")\n' \
    "$marks/$2" "$2" >"$1"
}
planted "$plant/cjson.lua" cjson
planted "$plant/lfs.lua" lfs
planted "$plant/oops/engine.lua" engine
planted "$plant/oops/json.lua" json
planted "$plant/oops/policy/init.lua" policy
ran() { ls "$marks" | paste -sd' '; }
# What an operator's or a user's environment may add: relative entries.
export LUA_PATH="./?.lua;./?/init.lua;;" LUA_CPATH="./?.so;;"
cd "$plant" || exit 1

out=$("$OOPS_BUILD/oopsd" --check --policies "$pol" 2>&1)
is "$?|$out" "0|ok" "oopsd --check started beside a planted engine: ok"
is "$(ran)" "" "... and ran none of the planted modules"

if start_server lp1 "$pol"; then
  _tap 0 "a server started beside them runs"
  wait_for 20 "... and answers /healthz 200" test "$(http_code "$(url lp1 /healthz)")" = 200
else
  _tap 1 "a server started beside them runs"
fi
stop_servers
is "$(ran)" "" "... having run none of them"

out=$("$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" migrate 2>&1)
out=$("$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" create --app shop/web --env prod --artifact a:1 \
  --policies "$pol" 2>&1)
like "$?|$out" "^0\|[a-z0-9]{12}$" "oopsctl create --policies started beside them creates the pipeline"
is "$(ran)" "" "... having run none of them"

cat >"$work/probe.lua" <<'EOF'
require("oops.json")
require("lfs")
require("oops.engine")
print(package.path)
print(package.cpath)
EOF
mapfile -t lines < <("$OOPS_BUILD/oopsd" lua "$work/probe.lua" 2>&1; echo "rc=$?")
is "${lines[2]:-}" "rc=0" "oopsd lua: a script requiring cjson, lfs and oops.engine runs" ||
  printf '%s\n' "${lines[@]}" | sed 's/^/#   /'
is "$(ran)" "" "... and loads none of the planted ones"
for i in 0 1; do
  rel=$(tr ';' '\n' <<<"${lines[$i]:-}" | grep -v '^/' | paste -sd' ')
  is "$rel" "" "package.$([[ $i == 0 ]] && echo path || echo cpath) holds only absolute entries"
done
like "${lines[0]:-}" "^$OOPS_ROOT/lua/\?\.lua;$OOPS_ROOT/lua/\?/init\.lua;/" "... the engine's directory first"

# A relative OOPS_LUA_DIR is refused (it would be searched from the cwd).
why="OOPS_LUA_DIR=. is not an absolute path (it would be searched from the current directory): give the full path"
out=$(OOPS_LUA_DIR=. "$OOPS_BUILD/oopsd" --check --policies "$pol" 2>&1)
is "$?|$out" "1|oopsd: $why" "oopsd --check with OOPS_LUA_DIR=.: exit 1, one line"
out=$(OOPS_LUA_DIR=. "$OOPS_BUILD/oopsd" lua "$work/probe.lua" 2>&1)
is "$?|$out" "1|oopsd lua: $why" "oopsd lua with OOPS_LUA_DIR=.: exit 1, one line"
out=$(OOPS_LUA_DIR=. "$OOPS_BUILD/oopsctl" --db "$OOPS_TEST_DB" create --app shop/web --env prod \
  --artifact a:2 --policies "$pol" 2>&1)
like "$?|$out" "^1\|oopsctl: create: OOPS_LUA_DIR=. is not an absolute path" "oopsctl create --policies with OOPS_LUA_DIR=.: exit 1"
is "$(ran)" "" "... and nothing planted ran"

# An installed copy others may write to: refused, naming the directory.
inst="$work/prefix"
DESTDIR="$work/stage" cmake --install "$OOPS_BUILD" --prefix /opt/oopsd >/dev/null 2>&1
mv "$work/stage/opt/oopsd" "$inst"
out=$("$inst/bin/oopsd" --check --policies "$pol" 2>&1)
is "$?|$out" "0|ok" "the installed copy, writable by its owner alone, loads"
for entry in share/oopsd/lua/oops share/oopsd/lua/oops/scans/build.lua share/oopsd share; do
  chmod g+w "$inst/$entry"
  out=$("$inst/bin/oopsd" --check --policies "$pol" 2>&1)
  is "$?|$(wc -l <<<"$out")" "1|1" "$entry writable by its group: oopsd --check exits 1 with one line"
  like "$out" "^oopsd: refusing the Lua engine installed beside $inst/bin/oopsd: $inst/$entry is writable by group [a-z0-9]+ \(mode [0-7]{4}\)" \
    "... naming $entry and why"
  chmod g-w "$inst/$entry"
done
chmod o+w "$inst/share/oopsd/lua/oops/engine.lua"
out=$("$inst/bin/oopsd" lua "$work/probe.lua" 2>&1)
like "$?|$out" "^1\|oopsd lua: refusing .*/oops/engine.lua is writable by every user" "an engine file anyone may write: oopsd lua refuses it"
out=$("$inst/bin/oopsctl" --db "$OOPS_TEST_DB" create --app shop/web --env prod --artifact a:3 \
  --policies "$pol" 2>&1)
like "$?|$out" "^1\|oopsctl: create: refusing .*/oops/engine.lua is writable by every user" "... so does oopsctl create --policies"
unlike "$out" "$OOPS_ROOT" "... without falling back to the source tree"
chmod o-w "$inst/share/oopsd/lua/oops/engine.lua"
out=$("$inst/bin/oopsd" --check --policies "$pol" 2>&1)
is "$?|$out" "0|ok" "modes fixed: it loads again"
is "$(ran)" "" "no planted module ran at any point"

done_testing
