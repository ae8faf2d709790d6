# scripts/package.sh: the Debian package builds, lintian reports no error,
# and the package unpacked with dpkg-deb -x runs from the unpacked tree
# (--version, --check on its /etc/oopsd/policies, its own Lua engine); its
# conffiles, its postinst (the system user, nothing enabled or started).
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
not_under_sanitizers "the package is built from a tree of its own (build-pkg/)"
if ! command -v dpkg-deb >/dev/null; then
  echo "ok 1 # SKIP dpkg-deb is missing (apt-get install dpkg-dev)"
  echo "1..1"; exit 0
fi
tmp=$(mktemp -d "${OOPS_TEST_WORK:-/tmp}/package.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unset OOPS_LUA_DIR OOPS_DB

# The build directory is package.sh's default (build-pkg/, incremental); the
# package goes to a directory of this test's.
out=$(bash "$OOPS_ROOT/scripts/package.sh" --out "$tmp/dist" --no-lintian 2>&1)
is "$?" 0 "scripts/package.sh exits 0" || printf '%s\n' "$out" | tail -30 | sed 's/^/#   /'
shopt -s nullglob
debs=("$tmp"/dist/oopsd_*.deb)
shopt -u nullglob
is "${#debs[@]}" 1 "it writes one oopsd_VERSION_ARCH.deb"
deb=${debs[0]:-$tmp/dist/none.deb}
version=$(sed -nE 's/^project\(oopsd VERSION ([0-9.]+).*/\1/p' "$OOPS_ROOT/CMakeLists.txt")
like "$(basename "$deb")" "^oopsd_${version}-[0-9]+_$(dpkg --print-architecture)\.deb$" "... named after the project's version"

if command -v lintian >/dev/null; then
  report=$(lintian --tag-display-limit 0 "$deb" 2>&1)
  errors=$(grep -E '^E: ' <<<"$report")
  is "$errors" "" "lintian reports no error"
  grep -E '^[WI]: ' <<<"$report" | sed 's/^/# lintian /'
else
  echo "ok $((TAP_N += 1)) # SKIP lintian is not installed"
fi

# The control data.
depends=$(dpkg-deb -f "$deb" Depends)
for d in libc6 liblua5.4-0 libmariadb3 libuv1 libcurl4 libmicrohttpd12 adduser lua-cjson lua-filesystem; do
  [[ ", $depends," == *", $d"[\ ,]* ]] || missing_dep+=" $d"
done
is "${missing_dep:-}" "" "Depends: the shared libraries (dpkg-shlibdeps), adduser, lua-cjson, lua-filesystem"
dpkg-deb -e "$deb" "$tmp/control"
conffiles=$(cat "$tmp/control/conffiles" 2>/dev/null)
like "$conffiles" "(^|
)/etc/oopsd/policies/apps\.lua(
|$)" "conffiles: /etc/oopsd/policies/apps.lua"
like "$conffiles" "(^|
)/etc/oopsd/policies/oopsd\.lua(
|$)" "conffiles: /etc/oopsd/policies/oopsd.lua"

dpkg-deb -x "$deb" "$tmp/root"
bad=""
while read -r f; do [[ -f $tmp/root$f ]] || bad+=" $f"; done <<<"$conffiles"
is "$bad" "" "every conffile is in the package"
is "$(cd "$tmp/root" && find etc -type f | sort | sed 's|^|/|')" "$conffiles" "... and every file under /etc is a conffile"
check "the md5sums match the files" bash -c "cd '$tmp/root' && md5sum --quiet -c '$tmp/control/md5sums'"
if [[ -f $OOPS_ROOT/contrib/systemd/oopsd.service ]]; then
  units=$(cd "$tmp/root" && find . -name oopsd.service -path '*systemd/system/*')
  like "$units" "^\./(usr/)?lib/systemd/system/oopsd\.service$" "the systemd unit is installed"
  is "$(cd "$tmp/root" && find . -path '*.wants*' -o -path './etc/systemd/*' | head -1)" "" "... and not enabled (no .wants link)"
fi

# The postinst, with stand-ins for the commands it may call.
check "the postinst is executable" test -x "$tmp/control/postinst"
check "... and valid sh" sh -n "$tmp/control/postinst"
mkdir -p "$tmp/stub"
for c in adduser useradd addgroup groupadd systemctl deb-systemd-helper deb-systemd-invoke invoke-rc.d service; do
  printf '#!/bin/sh\necho "%s $*" >>"%s/calls"\n' "$c" "$tmp" >"$tmp/stub/$c"
  chmod +x "$tmp/stub/$c"
done
printf '#!/bin/sh\nexit 2\n' >"$tmp/stub/getent" # no user oopsd yet
chmod +x "$tmp/stub/getent"
: >"$tmp/calls"
PATH="$tmp/stub:$PATH" sh "$tmp/control/postinst" configure; is "$?" 0 "postinst configure exits 0"
calls=$(cat "$tmp/calls")
like "$(sed -n 1p <<<"$calls")" "^adduser --system .*--group.* oopsd$" "... creating the system user and group oopsd"
like "$(sed -n 2p <<<"$calls")" "^adduser --system .*--group.*--home /var/lib/oops-run.* oops-run$" \
  "... and oops-run, whom commands run as (--run-as), with its home"
unlike "$calls" "systemctl|deb-systemd|invoke-rc.d|service " "... without enabling or starting anything"
printf '#!/bin/sh\necho "oopsd:x:999:999::/var/lib/oopsd:/usr/sbin/nologin"\n' >"$tmp/stub/getent"
: >"$tmp/calls"
PATH="$tmp/stub:$PATH" sh "$tmp/control/postinst" configure; is "$?" 0 "postinst configure again exits 0"
is "$(cat "$tmp/calls")" "" "... and leaves an existing user alone"

# Run from the unpacked tree: usr/bin finds usr/share/oopsd/lua beside it.
mkdir -p "$tmp/run"
cd "$tmp/run" || exit 1
export HOME="$tmp/run"
r="$tmp/root"
out=$("$r/usr/bin/oopsd" --version); is "$?" 0 "the unpacked oopsd --version exits 0"
like "$out" "^oopsd $version \(commit [A-Za-z0-9._+-]+\)$" "... oopsd $version (commit ...)"
out=$("$r/usr/bin/oopsctl" --version)
like "$out" "^oopsctl $version \(commit [A-Za-z0-9._+-]+\)$" "the unpacked oopsctl --version: oopsctl $version (commit ...)"
out=$("$r/usr/bin/oopsd" --check --policies "$r/etc/oopsd/policies"); is "$?" 0 "the unpacked oopsd --check on the package's policies exits 0"
is "$out" "ok" "... and prints ok"
echo 'print(package.searchpath("oops.engine", package.path)); print(package.path)' >probe.lua
mapfile -t lines < <("$r/usr/bin/oopsd" lua probe.lua 2>&1)
is "${lines[0]:-}" "$r/usr/share/oopsd/lua/oops/engine.lua" "... with the unpacked engine"
unlike "${lines[1]:-}" "$OOPS_ROOT" "... and no source tree on package.path"

done_testing
