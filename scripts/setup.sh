#!/usr/bin/env bash
# Install what oopsd needs to build, test and run its demo — only what is
# missing, from Debian's packages — then build it. Idempotent; safe to rerun.
#   scripts/setup.sh            build into build/
#   scripts/setup.sh --asan     also build build-asan/ (AddressSanitizer + UBSan)
#   scripts/setup.sh --fuzz     also build build-fuzz/ (clang, -DOOPS_FUZZ=ON: the
#                               libFuzzer harnesses of fuzz/, run with fuzz/run)
# Options combine: scripts/setup.sh --asan --fuzz (what scripts/test.sh does).
set -euo pipefail
cd "$(dirname "$0")/.."

asan=0 fuzz=0
for arg in "$@"; do
  case $arg in
    --asan) asan=1 ;;
    --fuzz) fuzz=1 ;;
    *) echo "usage: scripts/setup.sh [--asan] [--fuzz]" >&2; exit 1 ;;
  esac
done

packages=(
  build-essential cmake pkg-config
  liblua5.4-dev lua5.4 libuv1-dev libmariadb-dev libmariadb-dev-compat
  libcmocka-dev lua-busted lua-cjson lua-filesystem libcurl4-openssl-dev libmicrohttpd-dev
  mariadb-server mariadb-client curl procps bc
  iproute2 # `ip netns`: the partition scenario (tests/scenarios/partition.lua)
  gnuplot-nox # bench/run: the PNG plots
  clang-format lua-check # tests/style.sh: the C's layout and the Lua's lint
  jq # examples/kubernetes/ and its offline tests (kubectl: below)
  libsystemd-dev # sd_notify: Type=notify, the watchdog
  scdoc man-db # the manual pages (doc/*.scd), rendered by `man -l` in a test
  prometheus # promtool: contrib/prometheus/ rules and /metrics checked
  lintian dpkg-dev fakeroot # scripts/package.sh: the Debian package, checked
  openssl # the test MariaDB's TLS certificates
  apache2-utils # htpasswd: the test Prometheus' basic-auth password (bcrypt)
  faketime tzdata # tests/scenarios/clocks.lua (skewed clocks), time_zones.lua (host zones)
  clang libclang-rt-14-dev llvm # fuzz/: clang-14, its libFuzzer runtime, llvm-symbolizer
  chromium fonts-liberation # tests/integration/fleet_page.sh: the fleet page in a real browser
)

# node and npm drive that browser (puppeteer-core): Debian's nodejs and npm,
# unless a node/npm is installed already (NodeSource's nodejs ships its own npm
# and conflicts with Debian's npm package).
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)

# kubectl for examples/kubernetes/: Debian's kubernetes-client, unless a
# kubectl is installed already (another package owns /usr/bin/kubectl then).
command -v kubectl >/dev/null || packages+=(kubernetes-client)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: run as root (or install sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # The Debian mariadb-server package tries to start a system service; a
  # policy-rc.d refusal (containers) is harmless: oopsd's scripts start their own.
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

build() { # dir, extra cmake args... ($target: build only that target)
  local dir=$1; shift
  local log; log=$(mktemp)
  if ! { cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" &&
         cmake --build "$dir" -j"$(nproc)" ${target:+--target "$target"}; } >"$log" 2>&1; then
    echo "setup: the build in $dir failed:" >&2; grep -E 'error|Error' "$log" | head -40 >&2; rm -f "$log"; exit 1
  fi
  rm -f "$log"
}
build build
((asan)) && build build-asan -DOOPS_SANITIZE=ON
# The harnesses only (the core under ASan/UBSan + coverage comes with them).
((fuzz)) && CC=clang target=fuzz build build-fuzz -DOOPS_FUZZ=ON
echo "setup: built build/oopsd and build/oopsctl"
