# `cmake --install` (cmake/install.cmake): the layout, then the installed
# copy run from elsewhere with the source and build trees out of its way:
# moved to another prefix, cwd and HOME in a temporary directory,
# OOPS_LUA_DIR unset. It must find its Lua engine beside itself (never the
# source tree compiled in), check the installed policies, run a scenario,
# and report its version (--version, the start line, /status, /metrics).
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
source "$OOPS_ROOT/tests/lib/oopsd.sh"
tmp=$(mktemp -d "${OOPS_TEST_WORK:-/tmp}/install.XXXXXX")
trap 'stop_servers; rm -rf "$tmp"' EXIT
unset OOPS_LUA_DIR OOPS_DB

# DESTDIR as well as --prefix: whatever a rule installs to an absolute path
# (the unit, /etc/default/oopsd) lands in the staging directory too.
out=$(DESTDIR="$tmp/stage" cmake --install "$OOPS_BUILD" --prefix /opt/oopsd 2>&1)
is "$?" 0 "cmake --install into a staging prefix exits 0" || printf '%s\n' "$out" | sed 's/^/#   /'
p="$tmp/stage/opt/oopsd"
missing=""
for f in bin/oopsd bin/oopsctl share/oopsd/lua/oops/engine.lua share/oopsd/lua/oops/policy/init.lua \
  share/oopsd/lua/oops/scans/build.lua share/oopsd/lua/oops/gateways/simulated.lua \
  share/oopsd/lua/oops/scenario/init.lua share/oopsd/lua/oops/scenario/cli.lua \
  share/bash-completion/completions/oopsctl etc/oopsd/policies/apps.lua etc/oopsd/policies/oopsd.lua; do
  [[ -f $p/$f ]] || missing+=" $f"
done
is "$missing" "" "bin/, share/oopsd/lua/oops/** (scenario/ too), the completion and etc/oopsd/policies are installed"
is "$(cd "$OOPS_ROOT/lua" && find oops -name '*.lua' | sort)" "$(cd "$p/share/oopsd/lua" && find oops -type f | sort)" \
  "share/oopsd/lua holds exactly the engine's *.lua files"
check "the binaries are executable" test -x "$p/bin/oopsd" -a -x "$p/bin/oopsctl"
check "the bash completion loads and completes oopsctl's commands" \
  bash -c "source '$p/share/bash-completion/completions/oopsctl' && COMP_WORDS=(oopsctl sce) COMP_CWORD=1 && _oopsctl && [[ \${COMPREPLY[*]} == scenario ]]"

# An operator's edit of an installed policy survives a reinstall; the shipped one goes beside it.
echo '-- edited' >>"$p/etc/oopsd/policies/apps.lua"
# A module an older version installed where the engine no longer has it (policy.lua
# became policy/, and Lua finds oops/policy.lua first): a reinstall removes it.
echo 'error("stale")' >"$p/share/oopsd/lua/oops/policy.lua"
DESTDIR="$tmp/stage" cmake --install "$OOPS_BUILD" --prefix /opt/oopsd >/dev/null 2>&1
check "a reinstall leaves no engine module of an older install behind" test ! -e "$p/share/oopsd/lua/oops/policy.lua"
like "$(tail -n 1 "$p/etc/oopsd/policies/apps.lua")" "^-- edited$" "a reinstall keeps an edited policy file"
check "... and writes the shipped one as apps.lua.dist" cmp "$OOPS_ROOT/policies/apps.lua" "$p/etc/oopsd/policies/apps.lua.dist"
rm "$p/etc/oopsd/policies/apps.lua.dist"; cp "$OOPS_ROOT/policies/apps.lua" "$p/etc/oopsd/policies/apps.lua"

# Moved to another prefix: nothing refers to where it was installed or built.
inst="$tmp/elsewhere"
cp -a "$p" "$inst"
rm -rf "$tmp/stage"
mkdir -p "$tmp/run"
cd "$tmp/run" || exit 1
export HOME="$tmp/run"
mkdir -p "$inst/share/oopsd/lua/oops/only_installed"
echo 'return "installed"' >"$inst/share/oopsd/lua/oops/only_installed/init.lua"
cat >probe.lua <<'EOF'
print(package.path)
print((require("oops.only_installed")))
print(package.searchpath("oops.engine", package.path))
EOF
out=$("$inst/bin/oopsd" lua probe.lua 2>&1); is "$?" 0 "the moved oopsd runs a Lua script"
mapfile -t lines <<<"$out"
like "${lines[0]:-}" "^$inst/share/oopsd/lua/\?\.lua;" "package.path starts with PREFIX/share/oopsd/lua of the moved copy"
unlike "${lines[0]:-}" "$OOPS_ROOT" "... and names no source tree"
is "${lines[1]:-}" "installed" "a module only the moved copy has is found"
is "${lines[2]:-}" "$inst/share/oopsd/lua/oops/engine.lua" "oops.engine resolves to the moved copy"
out=$(OOPS_LUA_DIR="$OOPS_ROOT/lua" "$inst/bin/oopsd" lua probe.lua 2>&1)
like "$out" "^$OOPS_ROOT/lua/\?\.lua;" "OOPS_LUA_DIR still overrides"

out=$("$inst/bin/oopsd" --check --policies "$inst/etc/oopsd/policies"); is "$?" 0 "the moved oopsd --check on the installed policies exits 0"
is "$out" "ok" "... and prints ok"

# --version: NAME VERSION (commit GIT-DESCRIBE), the project's version.
version=$(sed -nE 's/^project\(oopsd VERSION ([0-9.]+).*/\1/p' "$OOPS_ROOT/CMakeLists.txt")
out=$("$inst/bin/oopsd" --version); is "$?" 0 "oopsd --version exits 0"
like "$out" "^oopsd $version \(commit [A-Za-z0-9._+-]+\)$" "oopsd --version: oopsd $version (commit ...)"
c=${out##*(commit }; c=${c%)}; c=${c%-dirty}
if [[ $c == unknown ]] || ! git -C "$OOPS_ROOT" rev-parse -q --verify "$c^{commit}" >/dev/null 2>&1; then
  git -C "$OOPS_ROOT" rev-parse --git-dir >/dev/null 2>&1 && _tap 1 "... naming a commit of this checkout" "got: $out" ||
    _tap 0 "... naming a commit of this checkout # SKIP not a git checkout"
else
  _tap 0 "... naming a commit of this checkout"
fi
out=$("$inst/bin/oopsctl" --version); is "$?" 0 "oopsctl --version exits 0"
like "$out" "^oopsctl $version \(commit [A-Za-z0-9._+-]+\)$" "oopsctl --version: oopsctl $version (commit ...)"
build_version=$("$inst/bin/oopsd" --version); build_version=${build_version#oopsd }

# A scenario run by the moved oopsctl: the runner (cli.lua) and its servers
# come from the moved copy; the servers drive the installed policies.
cat >installed.lua <<'EOF'
local FAST = [[
scan    { interval = "300ms" }
gateway "simulated" { build = "300ms", deploy = "0s", rollout = "300ms" }
notify  { log = true, retry = { initial = "200ms", max = "1s" } }
]]
local inst = os.getenv("OOPS_INSTALLED")
local all = servers { count = 2, policies = inst .. "/etc/oopsd/policies", overrides = { ["oopsd.lua"] = FAST } }
local p = create { app = "shop/api", env = "staging" }
expect(p:wait("SUCCEEDED", 30), "a pipeline succeeds on the installed policies")
expect(package.path:find(inst .. "/share/oopsd/lua/", 1, true) == 1, "the runner loads the moved copy's engine",
  package.path)
expect(not package.path:find(os.getenv("OOPS_SRC"), 1, true), "... and no source tree")
expect(all[1]:log():find("started: oopsd " .. os.getenv("OOPS_BUILD_VERSION"), 1, true) ~= nil,
  "a server's start line carries its version", all[1]:log())
EOF
out=$(OOPS_INSTALLED="$inst" OOPS_SRC="$OOPS_ROOT" OOPS_BUILD_VERSION="$build_version" \
  timeout 60 "$inst/bin/oopsctl" --db "$OOPS_TEST_DB" scenario installed.lua 2>&1)
rc=$?
is "$rc" 0 "the moved oopsctl runs a scenario with the moved oopsd (exit 0)" || printf '%s\n' "$out" | grep -vE '^ok ' | head -30 | sed 's/^/#   /'
like "$out" "ok [0-9]+ - the runner loads the moved copy's engine" "... whose runner loads the moved copy's engine"
like "$out" "ok [0-9]+ - a server's start line carries its version" "... and whose servers log their version at start"

# A server from the moved copy: its version in /status and /metrics.
if OOPS_BUILD="$inst/bin" start_server inst1 "$inst/etc/oopsd/policies"; then
  like "$(grep -m1 'started:' "${SRV_LOG[inst1]}")" "started: oopsd ${build_version//[()+.]/.}, lock session" "the start line: started: oopsd VERSION (commit ...)"
  st=$(curl -s "$(url inst1 /status)")
  like "$st" "\"version\":\"$version\"" "/status has the version"
  like "$st" "\"commit\":\"[A-Za-z0-9._+-]+\"" "... and the commit"
  m=$(curl -s "$(url inst1 /metrics)")
  like "$m" "(^|
)oops_build_info\{version=\"$version\",commit=\"[A-Za-z0-9._+-]+\"\} 1(
|$)" "/metrics: oops_build_info{version,commit} 1"
  like "$m" "# TYPE oops_build_info gauge" "... a gauge"
else
  _tap 1 "the moved oopsd starts as a server"
fi
stop_servers

done_testing
