# Every link of the documentation resolves (issue 35): each Markdown link
# [text](target) and image ![alt](target) in README.md and doc/**/*.md.
#   - a relative target must exist, read from the file's directory ("/x" from
#     the repository's root), and a #anchor must name a heading of the target
#     file as GitHub makes it (lower case, punctuation dropped, each space a
#     hyphen, -1, -2... on repeats; "#L12" is a line of any other file);
#   - an http(s) target is only checked to look like a URL (no network);
#   - any other scheme is refused.
# What sits in code (fenced blocks, `spans`) is not a link. One line per file,
# a failure naming each broken link with its line; then the check itself is
# shown to catch a broken file, anchor and URL.
set -u
source "$OOPS_ROOT/tests/lib/tap.sh"
not_under_sanitizers "no C runs in it"
work=$OOPS_TEST_WORK/doc_links.$$
mkdir -p "$work"

# links FILE: "LINE<TAB>TARGET" for each link and image outside code. A
# paragraph's lines are joined first (a link's text may wrap), code spans
# blanked (same length, so a position still tells its line).
links() {
  awk '
    function blanks(n,   s) { s = ""; while (n-- > 0) s = s " "; return s }
    function flush(   text, k, p, off, rest, t, ln) {
      if (n == 0) return
      text = ""
      for (k = 1; k <= n; k++) { start[k] = length(text) + 1; text = text buf[k] " " }
      while (match(text, /`[^`]*`/))
        text = substr(text, 1, RSTART - 1) blanks(RLENGTH) substr(text, RSTART + RLENGTH)
      off = 0; rest = text
      while (match(rest, /\[[^]]*\]\([^) ]*\)/)) {
        p = off + RSTART
        t = substr(rest, RSTART, RLENGTH); sub(/^\[[^]]*\]\(/, "", t); sub(/\)$/, "", t)
        ln = line[1]
        for (k = 1; k <= n; k++) if (start[k] <= p) ln = line[k]
        printf "%d\t%s\n", ln, t
        off += RSTART + RLENGTH - 1; rest = substr(rest, RSTART + RLENGTH)
      }
      n = 0
    }
    /^[ \t]*(```|~~~)/ { flush(); fence = !fence; next }
    fence { next }
    /^[ \t]*$/ { flush(); next }
    { n++; buf[n] = $0; line[n] = NR }
    END { flush() }' "$1"
}

# anchors FILE: the anchor of each heading outside code, as GitHub makes it.
anchors() {
  awk '
    /^[ \t]*(```|~~~)/ { fence = !fence; next }
    fence { next }
    /^#+[ \t]/ {
      h = $0; match(h, /^#+/); if (RLENGTH > 6) next
      sub(/^#+[ \t]+/, "", h); sub(/[ \t]+#+[ \t]*$/, "", h); sub(/[ \t]+$/, "", h); print h
    }' "$1" |
    sed -E 's/!?\[([^]]*)\]\([^)]*\)/\1/g; s/[`*]//g' |
    LC_ALL=C.UTF-8 sed -E 's/.*/\L&/; s/[^[:alnum:] _-]//g; s/ /-/g' |
    awk '{ s = $0; if (seen[s]++) s = s "-" (seen[$0] - 1); print s }'
}

# why_broken FILE ROOT TARGET: nothing when the target resolves, else why not.
why_broken() {
  local file=$1 root=$2 target=$3 path anchor dest
  case $target in
    http://* | https://*)
      [[ $target =~ ^https?://[A-Za-z0-9.-]+(:[0-9]+)?([/?#][^[:space:]]*)?$ ]] || echo "not a URL"
      return ;;
    "") echo "empty target"; return ;;
  esac
  if [[ $target =~ ^[A-Za-z][A-Za-z0-9+.-]*: ]]; then
    echo "neither a relative path nor an http(s) URL"; return
  fi
  path=${target%%#*} anchor=""
  [[ $target == *"#"* ]] && anchor=${target#*#}
  if [[ -z $path ]]; then dest=$file
  elif [[ $path == /* ]]; then dest=$root$path
  else dest=$(dirname "$file")/$path; fi
  [[ -e $dest ]] || { echo "no such file: ${dest#"$root"/}"; return; }
  [[ -n $anchor ]] || return
  if [[ $dest == *.md ]]; then
    anchors "$dest" | grep -qxF -- "$anchor" || echo "no heading #$anchor in ${dest#"$root"/}"
  elif [[ -d $dest || ! $anchor =~ ^L[0-9]+(-L[0-9]+)?$ ]]; then
    echo "#$anchor: only a Markdown file's headings (or #L12, a line) can be linked to"
  fi
}

# broken FILE ROOT: "line N: TARGET: why" for each broken link; the number of
# links on the last line.
broken() {
  local ln target why count=0
  while IFS=$'\t' read -r ln target; do
    count=$((count + 1))
    why=$(why_broken "$1" "$2" "$target")
    [[ -z $why ]] || echo "line $ln: ($target): $why"
  done < <(links "$1")
  echo "$count"
}

root=$OOPS_ROOT
mapfile -t files < <(
  echo "$root/README.md"
  find "$root/doc" -name '*.md' -type f | LC_ALL=C sort
)
check "README.md and doc/ hold the guide (doc/README.md and at least 5 files in doc/guide/)" \
  test -f "$root/doc/README.md" -a "$(find "$root/doc/guide" -name '*.md' | wc -l)" -ge 5
for f in "${files[@]}"; do
  out=$(broken "$f" "$root")
  n=$(tail -n 1 <<<"$out") bad=$(sed '$d' <<<"$out")
  rel=${f#"$root"/}
  if [[ -z $bad ]]; then _tap 0 "$rel: $n links, none broken"
  else _tap 1 "$rel: $n links, none broken" "$bad"; fi
done

# The check itself: a small tree with one link of each kind, good and broken.
t=$work/tree
mkdir -p "$t/doc/sub"
printf 'x\n' >"$t/doc/pic.png"
cat >"$t/doc/sub/b.md" <<'EOF'
# B's title

## Sizing the database's connections: `max_connections` — and more

## Twice

## Twice
EOF
cat >"$t/doc/a.md" <<'EOF'
# A

A good one: [b](sub/b.md#b's-title) is wrong, [b](sub/b.md#bs-title) is right, and so are
[the
sizing](sub/b.md#sizing-the-databases-connections-max_connections--and-more), [the second
twice](sub/b.md#twice-1), ![a picture](pic.png), [root](/doc/a.md#a), [here](#a) and
[a site](https://example.org/x?y=1#z).

Broken: [gone](sub/c.md), [no anchor](sub/b.md#nope), [a third twice](sub/b.md#twice-2),
![gone too](sub/pic.png), [not a url](https://), [ftp](ftp://example.org/x).

In code, no link: `[x](nowhere.md)`, and

```sh
echo "[y](nowhere.md)"
```
EOF
want="line 3: (sub/b.md#b's-title): no heading #b's-title in doc/sub/b.md
line 9: (sub/c.md): no such file: doc/sub/c.md
line 9: (sub/b.md#nope): no heading #nope in doc/sub/b.md
line 9: (sub/b.md#twice-2): no heading #twice-2 in doc/sub/b.md
line 10: (sub/pic.png): no such file: doc/sub/pic.png
line 10: (https://): not a URL
line 10: (ftp://example.org/x): neither a relative path nor an http(s) URL"
out=$(broken "$t/doc/a.md" "$t")
is "$(sed '$d' <<<"$out")" "$want" \
  "the check names each broken link (file, anchor, scheme) and passes the good ones"
is "$(tail -n 1 <<<"$out")" 14 "... and counts every link outside code (14), none inside"
done_testing
