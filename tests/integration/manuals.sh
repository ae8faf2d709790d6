# The manual pages (doc/*.scd, built by cmake/man.cmake into BUILD/man):
#   1. each page is built from its current source and renders with man -l at 80
#      columns without a single groff warning;
#   2. oopsd.policy(5) documents every key of the policy language: the list
#      comes from the loader itself (policy.keys(): the very tables its
#      Decl:only checks use, the hooks, the placeholders), and each key must be
#      a term line ("       KEY = ...") in its block's section of the rendered
#      page, so a key added to the loader without a manual entry fails here;
#   3. every command and flag of `oopsctl --help` is in oopsctl(1), every flag
#      of `oopsd --help` in oopsd(8).
# Rendering uses --nh --nj (no hyphenation, no justification): a word is never
# split across lines by the formatter, so what is looked for is found whole.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
man_dir=$OOPS_BUILD/man
doc=$OOPS_ROOT/doc
work=$OOPS_TEST_WORK/manuals.$$
mkdir -p "$work"

render() { MANWIDTH=80 man --nh --nj -l "$1" 2>/dev/null; }

# 1. built, current, rendering cleanly.
for src in "$doc"/*.scd; do
  page=$(basename "$src" .scd)
  built=$man_dir/$page
  if [[ ! -s $built ]]; then
    _tap 1 "$page is built (cmake --build: cmake/man.cmake, needs scdoc)" "missing: $built"
    continue
  fi
  _tap 0 "$page is built"
  # The same scdoc run on the source gives the built page (but for the date).
  scdoc <"$src" >"$work/$page" 2>"$work/$page.err"
  is "$(diff <(grep -v '^\.TH ' "$built") <(grep -v '^\.TH ' "$work/$page") | head -5)" "" \
    "... from its current source ($(basename "$src"))"
  warnings=$(MANWIDTH=80 man --warnings -l "$built" 2>&1 >/dev/null)
  is "$warnings" "" "... and man -l renders it at 80 columns with no warning"
  like "$(render "$built")" "^${page%.*}\(${page##*.}\) " "... starting with its title, ${page%.*}(${page##*.})"
done

policy=$man_dir/oopsd.policy.5
ctl=$man_dir/oopsctl.1
daemon=$man_dir/oopsd.8
[[ -s $policy && -s $ctl && -s $daemon ]] || { done_testing; exit; }

# 2. Every policy key, from the loader.
cat >"$work/keys.lua" <<'EOF'
for _, k in ipairs(require("oops.policy").keys()) do print(k[1] .. "\t" .. k[2]) end
EOF
keys=$("$OOPS_BUILD/oopsd" lua "$work/keys.lua"); rc=$?
is "$rc" 0 "the loader lists its keys (policy.keys() through oopsd lua)"
like "$keys" $'application\ttimeouts.submit' "... the nested ones as dotted paths"
check "... a few dozen of them" test "$(wc -l <<<"$keys")" -ge 50

# missing_keys RENDERED_TEXT KEYS: each "block<TAB>key" whose block's section
# (a heading "   block" or "BLOCK", quotes dropped as groff drops them; hooks
# under HOOKS, placeholders under PLACEHOLDERS) has no line starting with the
# key as a term: 7 spaces, the key, then a space, "(" or the end of the line.
missing_keys() {
  awk -v keys="$2" '
    BEGIN {
      n = split(keys, lines, "\n")
      for (i = 1; i <= n; i++) { split(lines[i], f, "\t"); blk[i] = f[1]; key[i] = f[2] }
    }
    /^[A-Z]/ { sec = $0; next }
    /^   [^ ]/ { sub(/^ +/, ""); sec = $0; next }
    /^       [^ ]/ { line = substr($0, 8); terms[sec] = terms[sec] "\n" line }
    END {
      for (i = 1; i <= n; i++) {
        s = blk[i]; gsub(/"/, "", s)
        if (s == "hook") s = "HOOKS"
        if (s == "placeholder") s = "PLACEHOLDERS"
        found = 0
        m = split(terms[s], t, "\n")
        for (j = 1; j <= m; j++) {
          if (substr(t[j], 1, length(key[i])) == key[i]) {
            c = substr(t[j], length(key[i]) + 1, 1)
            if (c == "" || c == " " || c == "(") { found = 1; break }
          }
        }
        if (!found) print blk[i] "\t" key[i]
      }
    }' <<<"$1"
}
text=$(render "$policy")
missing=$(missing_keys "$text" "$keys")
is "$missing" "" "oopsd.policy(5) documents every policy key, hook and placeholder in its section"
# The check itself: a page without one key's entry, or with it under another
# block, is caught.
is "$(missing_keys "$(grep -v '^       probe\.token = ' <<<"$text")" "$keys")" $'alert\tprobe.token' \
  "... (the check fails for a page that lacks one key)"
is "$(missing_keys "$text" $'scan\tworkdir\ngateway "exec"\tworkdir')" $'scan\tworkdir' \
  "... (and for a key documented under another block)"
# Every default (policy.DEFAULTS, the one place defaults are written) is
# stated as "Default VALUE" in its key's entry.
cat >"$work/defaults.lua" <<'EOF'
local function walk(t, path, out)
  for k, v in pairs(t) do
    local p = path and (path .. "." .. k) or k
    if type(v) == "table" then walk(v, p, out) else out[#out + 1] = p .. "\t" .. tostring(v) end
  end
  return out
end
local lines = walk(require("oops.policy").DEFAULTS, nil, {})
table.sort(lines)
for _, l in ipairs(lines) do
  -- gateway.simulated.build is the key build of the block 'gateway "simulated"'
  local kind, rest = l:match("^gateway%.([^.]+)%.(.*)$")
  if kind then l = 'gateway "' .. kind .. '".' .. rest end
  local block, key, value = l:match('^(gateway "[^"]*")%.([^\t]+)\t(.*)$')
  if not block then block, key, value = l:match("^([^.]+)%.([^\t]+)\t(.*)$") end
  print(block .. "\t" .. key .. "\t" .. value)
end
EOF
defaults=$("$OOPS_BUILD/oopsd" lua "$work/defaults.lua")
check "policy.DEFAULTS lists a few dozen defaults" test "$(wc -l <<<"$defaults")" -ge 20
# wrong_defaults RENDERED_TEXT DEFAULTS: each "block<TAB>key<TAB>value" whose
# entry (the term line and the lines indented under it, joined) does not say
# "Default VALUE".
wrong_defaults() {
  awk -v defs="$2" '
    BEGIN {
      n = split(defs, lines, "\n")
      for (i = 1; i <= n; i++) { split(lines[i], f, "\t"); blk[i] = f[1]; key[i] = f[2]; val[i] = f[3] }
    }
    function close_entry() { if (term != "") entry[sec SUBSEP term] = para; term = "" }
    /^[A-Z]/ { close_entry(); sec = $0; next }
    /^   [^ ]/ { close_entry(); sec = $0; sub(/^ +/, "", sec); next }
    /^       [^ ]/ { close_entry(); line = substr($0, 8); term = line; sub(/ .*/, "", term); para = line; next }
    /^        / { if (term != "") { l = $0; sub(/^ +/, "", l); para = para " " l } next }
    END {
      close_entry()
      for (i = 1; i <= n; i++) {
        s = blk[i]; gsub(/"/, "", s)
        p = entry[s SUBSEP key[i]] " "
        found = 0
        for (j = 1; j <= 4; j++) if (index(p, "Default " val[i] substr(" ,.;", j, 1))) found = 1
        if (!found) print blk[i] "\t" key[i] "\t" val[i]
      }
    }' <<<"$1"
}
is "$(wrong_defaults "$text" "$defaults")" "" "oopsd.policy(5) states every default of policy.DEFAULTS in its key's entry"
is "$(wrong_defaults "$text" $'rollout\tmax\t45m')" $'rollout\tmax\t45m' "... (the check fails for a default the page does not state)"
for block in scan build deploy rollout analysis locks restarts alert notify application; do
  check "oopsd.policy(5) has a section for the $block declaration" grep -qx "   $block" <<<"$text"
done

# 3. oopsctl commands and flags; oopsd flags.
usage=$("$OOPS_BUILD/oopsctl" --help)
text=$(render "$ctl")
commands=$(sed -n '/^commands:/,/^$/p' <<<"$usage" | sed -nE 's/^  ([a-z]+)( .*|$)/\1/p')
check "oopsctl --help lists its commands" test "$(wc -w <<<"$commands")" -ge 10
for c in $commands; do
  check "oopsctl(1) documents the command $c" grep -qE "^       $c( |\$)" <<<"$text"
done
for f in $(grep -v '=value' <<<"$usage" | grep -oE -- '(^|[^a-z-])--?[a-z][a-z-]*' | grep -oE -- '--?[a-z][a-z-]*' | sort -u); do
  check "oopsctl(1) documents $f" grep -qE -- "(^|[^a-z-])$f([^a-z-]|\$)" <<<"$text"
done
usage=$("$OOPS_BUILD/oopsd" --help)
text=$(render "$daemon")
flags=$(grep -v '=value' <<<"$usage" | grep -oE -- '(^|[^a-z-])--[a-z][a-z-]*' | grep -oE -- '--[a-z][a-z-]*' | sort -u)
check "oopsd --help lists its flags" test "$(wc -w <<<"$flags")" -ge 7
for f in $flags; do
  check "oopsd(8) documents the flag $f" grep -qE -- "^       $f( |,|\$)" <<<"$text"
done
for v in OOPS_DB OOPS_DB_PASSWORD OOPS_DB_PASSWORD_FILE CREDENTIALS_DIRECTORY OOPS_LUA_DIR; do
  check "oopsd(8) documents the environment variable $v" grep -qE "^       ([A-Z_]+, )*$v(,|\$)" <<<"$text"
done
for s in SIGHUP SIGTERM SIGINT SIGQUIT SIGUSR1 /healthz /status /metrics; do
  check "oopsd(8) documents $s" grep -qE "^       ([^ ].*)?$s" <<<"$text"
done

done_testing
