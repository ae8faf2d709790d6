-- docs_facts.lua: nothing lost when a README is cut down (issue 35). A
-- one-off check, not a test: it reads a README as it was at a commit and
-- reports every piece of it that is in neither today's README.md nor a file
-- under doc/ (*.md, *.scd).
--
--   lua5.4 scripts/docs_facts.lua BASE [--list]   BASE: a commit, e.g. 5642ebb;
--                                                 --list prints the pieces
--
-- The pieces: each sentence of each paragraph or list item, each line of a
-- code block, each table row, each heading's text. Both sides are compared
-- whitespace-collapsed, with a Markdown link reduced to its text (a quoted
-- section name that became a link still counts) and straight double quotes
-- dropped. A piece reworded on purpose is listed in REWORDED below with its
-- new wording (a string, or a list of them when it was split), which must
-- then be there instead.
-- Prints each missing piece with its old section; exit 0 when none is.

local REWORDED = {
  -- Two sections whose names said too little, or two things.
  ["Using it"] = "Using oopsctl: pipelines, releases, rollbacks, the audit log",
  ["Manuals and monitoring"] = { "The manual pages", "Monitoring" },
  -- The page is no longer below the endpoints: a link to page.md.
  ["Endpoints: `/` (the fleet page, below), `/healthz` (200 when the lock session is up and the "
    .. "policy is current, else 503 with the reason), `/metrics` (Prometheus text), `/status` "
    .. "(held locks, the pipelines this server drives, policy version)."] =
    "Endpoints: `/` (the fleet page), `/healthz` (200 when the lock session is up and the policy "
    .. "is current, else 503 with the reason), `/metrics` (Prometheus text), `/status` (held "
    .. "locks, the pipelines this server drives, policy version).",
  -- The grants are no longer above the rolling upgrade: a link to database.md.
  ["With the run-time grants above it starts but drives nothing — `/healthz` 503 ``waiting for "
    .. "`oopsctl migrate` ``, a log line every minute — and starts driving, without a restart, "
    .. "once the schema reaches its version."] =
    "With the run-time grants of Database grants it starts but drives nothing — `/healthz` 503 "
    .. "``waiting for `oopsctl migrate` ``, a log line every minute — and starts driving, "
    .. "without a restart, once the schema reaches its version.",
}

local base = arg[1]
if not base then
  io.stderr:write("usage: lua5.4 scripts/docs_facts.lua BASE [--list]\n")
  os.exit(1)
end

local function run(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  local ok = p:close()
  return out, ok
end

local old, ok = run("git show " .. base .. ":README.md")
if not ok or old == "" then
  io.stderr:write("docs_facts: git show " .. base .. ":README.md failed\n")
  os.exit(1)
end

-- Whitespace collapsed, links reduced to their text, no straight double quotes.
local function norm(s)
  s = s:gsub("!?%[([^%]]*)%]%([^)%s]*%)", "%1")
  s = s:gsub('"', "")
  s = s:gsub("%s+", " ")
  return (s:gsub("^ ", ""):gsub(" $", ""))
end

-- Sentences: split after . ! or ? (and a closing bracket or quote) followed
-- by a space and what starts a sentence: a capital, a digit, ( ` * or ".
local function sentences(text)
  local out, start, i = {}, 1, 1
  while true do
    local a, b = text:find('[.!?][)"]?%s+', i)
    if not a then break end
    local nxt = text:sub(b + 1, b + 1)
    if nxt:match('[A-Z0-9(`*"]') then
      out[#out + 1] = text:sub(start, b)
      start = b + 1
    end
    i = b + 1
  end
  out[#out + 1] = text:sub(start)
  return out
end

-- The old README's pieces: { text, section }.
local pieces, section = {}, "(top)"
local para = {}
local function add(text)
  text = norm(text)
  if text ~= "" then pieces[#pieces + 1] = { text, section } end
end
local function flush()
  if #para > 0 then
    for _, s in ipairs(sentences(table.concat(para, " "))) do add(s) end
  end
  para = {}
end
local fence = false
for line in (old .. "\n"):gmatch("(.-)\n") do
  if line:match("^%s*```") then
    flush()
    fence = not fence
  elseif fence then
    add(line)
  elseif line:match("^#+ ") then
    flush()
    section = line:gsub("^#+ ", "")
    add(section)
  elseif line:match("^%s*|") then
    flush()
    add(line)
  elseif line:match("^%s*$") then
    flush()
  elseif line:match("^%s*[-*] ") or line:match("^%s*%d+%. ") then
    flush() -- a list item starts a paragraph of its own
    para[1] = line:gsub("^%s*[-*] ", ""):gsub("^%s*%d+%. ", "")
  else
    para[#para + 1] = line
  end
end
flush()
if arg[2] == "--list" then
  for _, p in ipairs(pieces) do print(("[%s] %s"):format(p[2], p[1])) end
  os.exit(0)
end

-- Today's README and doc/, one text.
local files = { "README.md" }
local list = run("find doc -type f \\( -name '*.md' -o -name '*.scd' \\) | sort")
for f in list:gmatch("[^\n]+") do files[#files + 1] = f end
local parts = {}
for _, f in ipairs(files) do
  local fh = assert(io.open(f))
  parts[#parts + 1] = fh:read("a")
  fh:close()
end
local corpus = norm(table.concat(parts, "\n"))

local reworded = {}
for was, now in pairs(REWORDED) do reworded[norm(was)] = now end
local missing = 0
for _, p in ipairs(pieces) do
  local text, sec = p[1], p[2]
  local found = corpus:find(text, 1, true)
  local instead = reworded[text]
  if not found and instead then
    found = true
    for _, now in ipairs(type(instead) == "table" and instead or { instead }) do
      found = found and corpus:find(norm(now), 1, true) ~= nil
    end
  end
  if not found then
    missing = missing + 1
    print(("missing [%s]: %s"):format(sec, text))
  end
end
print(("%d pieces of %s:README.md checked against README.md and %d files under doc/: %d missing")
  :format(#pieces, base, #files - 1, missing))
os.exit(missing == 0 and 0 or 1)
