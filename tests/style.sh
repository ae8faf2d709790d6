#!/usr/bin/env bash
# The habits CI keeps (TAP): every tracked C file is as clang-format
# (.clang-format) writes it, and luacheck (.luacheckrc) finds nothing in
# lua/, policies/, tests/, bench/ and examples/, and no function is longer than
# its bound (tests/lib/function_lengths.lua). Run by `tests/run.sh BUILD style`.
# Fix a failure with:  git ls-files '*.c' '*.h' | xargs clang-format -i
set -uo pipefail
cd "$(dirname "$0")/.."
n=0 bad=0
tap() { # ok?, description
  n=$((n + 1))
  if (($1)); then echo "ok $n - $2"; else echo "not ok $n - $2"; bad=1; fi
}

if ! command -v clang-format >/dev/null || ! command -v luacheck >/dev/null; then
  echo "not ok 1 - clang-format and luacheck are installed (bash scripts/setup.sh installs them)"
  exit 1
fi

mapfile -t cfiles < <(git ls-files '*.c' '*.h' 2>/dev/null || find src tests fuzz -name '*.[ch]')
for f in "${cfiles[@]}"; do
  if out=$(clang-format --dry-run --Werror "$f" 2>&1); then
    tap 1 "clang-format: $f"
  else
    tap 0 "clang-format: $f"
    echo "$out" | head -n 6 | sed 's/^/# /'
  fi
done

if out=$(luacheck --config .luacheckrc --no-color --formatter plain --codes lua policies tests bench examples 2>&1); then
  tap 1 "luacheck: lua policies tests bench examples"
else
  tap 0 "luacheck: lua policies tests bench examples"
  echo "$out" | head -n 40 | sed 's/^/# /'
fi
# Functions a reader can hold in their head (issue 23): C in src/ at most 100
# lines, Lua in lua/oops/ at most 150 with its closures.
mapfile -t bounded < <(git ls-files 'src/*.c' 'lua/oops/*.lua' 2>/dev/null ||
  find src lua/oops -name '*.c' -o -name '*.lua')
if out=$(lua5.4 tests/lib/function_lengths.lua "${bounded[@]}" 2>&1); then
  tap 1 "function lengths: C in src/ <= 100 lines, Lua in lua/oops/ <= 150"
else
  tap 0 "function lengths: C in src/ <= 100 lines, Lua in lua/oops/ <= 150"
  echo "$out" | head -n 20 | sed 's/^/# /'
fi
echo "1..$n"
exit $bad
