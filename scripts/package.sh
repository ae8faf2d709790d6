#!/usr/bin/env bash
# The Debian package of oopsd, with dpkg-deb (no debhelper):
#   scripts/package.sh [--out DIR] [--build DIR] [--no-lintian]
# Configures and builds BUILD (default build-pkg/: prefix /usr, Debian's
# hardening flags from dpkg-buildflags), installs it into a staging tree
# (cmake --install --strip, DESTDIR), and writes DIR/oopsd_VERSION_ARCH.deb
# (default dist/). Then runs lintian when it is there (not with --no-lintian)
# and fails on any error it reports.
#
# What goes in: cmake/install.cmake's layout under /usr (/usr/bin, the Lua
# engine in /usr/share/oopsd/lua, the completion), /etc/oopsd/policies and
# whatever else lands under /etc as conffiles, the systemd unit and manual
# pages when their cmake rules install them (contrib/systemd/oopsd.service is
# copied to /lib/systemd/system if no rule did), /usr/share/doc/oopsd
# (packaging/copyright, packaging/changelog). Depends: dpkg-shlibdeps over
# the binaries, plus adduser (postinst) and the Lua modules the engine
# requires at run time (lua-cjson, lua-filesystem). packaging/postinst adds
# the system user oopsd; nothing enables or starts the unit.
# The version is project()'s in CMakeLists.txt; packaging/changelog's top
# entry must be VERSION-REVISION.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/dist build=$root/build-pkg lintian=1
while (($#)); do
  case $1 in
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --no-lintian) lintian=0; shift ;;
    *) echo "usage: scripts/package.sh [--out DIR] [--build DIR] [--no-lintian]" >&2; exit 1 ;;
  esac
done
for tool in cmake dpkg-deb dpkg-shlibdeps dpkg-buildflags dpkg-parsechangelog; do
  command -v "$tool" >/dev/null || { echo "package: $tool is missing (apt-get install dpkg-dev)" >&2; exit 1; }
done

version=$(sed -nE 's/^project\(oopsd VERSION ([0-9.]+).*/\1/p' "$root/CMakeLists.txt")
[[ -n $version ]] || { echo "package: no project(oopsd VERSION x.y.z ...) in CMakeLists.txt" >&2; exit 1; }
debversion=$(dpkg-parsechangelog -l "$root/packaging/changelog" -S Version)
if [[ ${debversion%-*} != "$version" ]]; then
  echo "package: packaging/changelog's top entry is $debversion, the project is $version: add an entry" >&2
  exit 1
fi
arch=$(dpkg --print-architecture)
mkdir -p "$build" "$out"
out=$(cd "$out" && pwd)
# One package build at a time in a build directory (tests may run two).
exec 9>"$build/.package.lock"
flock 9

# Debian's flags (hardening: fortify, stack protector, relro, bindnow, PIE).
eval "$(DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --export=sh)"
echo "package: building $build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
  -DCMAKE_C_FLAGS="$CPPFLAGS $CFLAGS" -DCMAKE_EXE_LINKER_FLAGS="$LDFLAGS" >"$build/.configure.log" ||
  { cat "$build/.configure.log" >&2; exit 1; }
cmake --build "$build" -j2 >"$build/.build.log" 2>&1 || { tail -40 "$build/.build.log" >&2; exit 1; }

stage=$build/.deb
rm -rf "$stage"
DESTDIR=$stage cmake --install "$build" --strip >"$build/.install.log" ||
  { cat "$build/.install.log" >&2; exit 1; }
if [[ -f $root/contrib/systemd/oopsd.service ]] && ! find "$stage" -name oopsd.service | grep -q .; then
  install -D -m 0644 "$root/contrib/systemd/oopsd.service" "$stage/lib/systemd/system/oopsd.service"
fi
# Manual pages compressed, as Debian ships them.
if [[ -d $stage/usr/share/man ]]; then
  find "$stage/usr/share/man" -type f ! -name '*.gz' -exec gzip -9n {} +
fi
doc=$stage/usr/share/doc/oopsd
install -D -m 0644 "$root/packaging/copyright" "$doc/copyright"
gzip -9n <"$root/packaging/changelog" >"$doc/changelog.Debian.gz"

# Modes as dpkg wants them; owners root:root (dpkg-deb --root-owner-group).
find "$stage" -type d -exec chmod 0755 {} +
find "$stage" -type f -exec chmod 0644 {} +
chmod 0755 "$stage"/usr/bin/*

mkdir -p "$stage/DEBIAN"
install -m 0755 "$root/packaging/postinst" "$stage/DEBIAN/postinst"
# Every file under /etc is the operator's to edit: dpkg keeps their changes.
(cd "$stage" && find etc -type f | sort | sed 's|^|/|') >"$stage/DEBIAN/conffiles"
[[ -s $stage/DEBIAN/conffiles ]] || rm "$stage/DEBIAN/conffiles"

# Depends from the shared libraries the binaries link (dpkg-shlibdeps needs
# a debian/control to read: a minimal one in a scratch directory).
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/debian"
printf 'Source: oopsd\n\nPackage: oopsd\nArchitecture: any\n' >"$scratch/debian/control"
shlibs=$(cd "$scratch" && dpkg-shlibdeps -O -e"$stage/usr/bin/oopsd" -e"$stage/usr/bin/oopsctl" 2>"$scratch/shlibdeps.err") ||
  { cat "$scratch/shlibdeps.err" >&2; exit 1; }
shlibs=${shlibs#shlibs:Depends=}
depends="$shlibs, adduser, lua-cjson, lua-filesystem"

size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s|@VERSION@|$debversion|" -e "s|@ARCH@|$arch|" -e "s|@SIZE@|$size|" \
  -e "s|@DEPENDS@|$depends|" "$root/packaging/control.in" >"$stage/DEBIAN/control"
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
  xargs -0 md5sum) >"$stage/DEBIAN/md5sums"

deb=$out/oopsd_${debversion}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "package: $deb"
if ((lintian)) && command -v lintian >/dev/null; then
  report=$(lintian --tag-display-limit 0 "$deb" 2>&1) || true
  [[ -n $report ]] && printf '%s\n' "$report"
  if grep -q '^E: ' <<<"$report"; then
    echo "package: lintian reports errors" >&2
    exit 1
  fi
fi
