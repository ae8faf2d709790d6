-- luacheck configuration (Debian lua-check 1.1.0). From the repository root:
--   luacheck --config .luacheckrc lua policies tests bench examples   (tests/style.sh)
--   luacheck .                                              (same files)
-- Both must report 0 warnings / 0 errors.
--
-- What is configured here is the languages the files are written in: Lua 5.4
-- for the engine, specs, bench and tools; busted's globals in specs; the
-- policy language (the sandbox of lua/oops/policy/) for policy files; the
-- scenario runner's functions (lua/oops/scenario/init.lua) for scenarios.
-- Everything else luacheck reports is fixed in the code, or ignored for one
-- file or line with the reason next to it.

std = "lua54"

-- The code keeps to 120 columns (comments, strings and code alike).
max_line_length = 120

-- Not ours, or not Lua, or not meant to parse:
exclude_files = {
  -- build trees (CMake copies nothing Lua there today, but a build may)
  "build*/**",
  -- libFuzzer's seed corpus for fuzz_policy: data, deliberately broken
  "fuzz/corpus/**",
  -- an editor's lock file next to a policy: the loader must skip it (its
  -- text is not Lua on purpose)
  "tests/spec/fixtures/policies/good/.#10_apps.lua",
  -- policies with a syntax error: the loader must report it
  "tests/spec/fixtures/policies/syntax/broken.lua",
  "tests/spec/fixtures/policies/multi_error/b.lua",
}

---------------------------------------------------------------- the policy language

-- What a policy file can read (lua/oops/policy/sandbox.lua, File:environment):
-- the declarations of File:language, the safe standard library of stdlib()
-- (the library tables are copies; string.dump, math.randomseed and everything
-- of os but getenv/time/date are left out), and the hooks of policy.HOOKS
-- (lua/oops/policy/keys.lua), the only globals a file may assign. Not lua54:
-- a name the sandbox refuses (io, print, require, setmetatable, ...) is an
-- error at load time, so luacheck reports it too.
stds.policy = {
  read_globals = {
    -- File:language
    "scan", "build", "deploy", "rollout", "locks", "restarts", "alert", "notify",
    "gateway", "application", "retention", "freeze", "analysis",
    -- stdlib()
    string = { fields = {
      "byte", "char", "find", "format", "gmatch", "gsub", "len", "lower", "match",
      "pack", "packsize", "rep", "reverse", "sub", "unpack", "upper",
    } },
    table = { fields = { "concat", "insert", "move", "pack", "remove", "sort", "unpack" } },
    math = { fields = {
      "abs", "acos", "asin", "atan", "ceil", "cos", "deg", "exp", "floor", "fmod", "huge",
      "log", "max", "maxinteger", "min", "mininteger", "modf", "pi", "rad", "random", "sin",
      "sqrt", "tan", "tointeger", "type", "ult",
    } },
    utf8 = { fields = { "char", "charpattern", "codepoint", "codes", "len", "offset" } },
    os = { fields = { "getenv", "time", "date" } },
    "pairs", "ipairs", "next", "select", "tostring", "tonumber", "type",
    "assert", "error", "pcall",
  },
  -- policy.HOOKS
  globals = { "on_build_lost", "on_transition" },
}

local policy_files = {
  "policies/*.lua",
  "tests/exec/policies/*.lua",
  "tests/fixtures/policies/**/*.lua",
  "tests/fixtures/chaos_policies/*.lua",
  "tests/spec/fixtures/policies/**/*.lua",
  "examples/*/*.lua",
}
for _, glob in ipairs(policy_files) do
  files[glob] = { std = "policy" }
end

---------------------------------------------------------------- scenarios

-- What `oopsctl scenario FILE` puts in scope beside _G
-- (lua/oops/scenario/init.lua, environment()).
stds.scenario = {
  read_globals = {
    "servers", "server", "create", "wait_until", "expect", "sql", "fault", "clear_fault",
    "sleep", "note", "oopsctl", "oopsctl_as", "fail_job", "delete_job", "fail_rollout", "receiver",
    "held_by", "held_elsewhere", "server_session", "prometheus", "artifact_traffic", "pod_use", "alert_edges", "alert_count",
    "settle", "oops", "skip", "restart_database", "workdir", "here", "rollback", "skewed_clock",
    "release_rules",
  },
}
files["tests/scenarios/*.lua"] = { std = "+scenario" }
-- loaded by the scenarios of tests/integration/explain.sh and grants.sh
files["tests/lib/workload.lua"] = { std = "+scenario" }
-- bench/run runs it as `oopsctl scenario bench/failover.lua`
files["bench/failover.lua"] = { std = "+scenario" }
files["bench/canary.lua"] = { std = "+scenario" }
-- run as `oopsctl scenario bench/clocks.lua`
files["bench/clocks.lua"] = { std = "+scenario" }

---------------------------------------------------------------- specs

files["tests/spec/**/*.lua"] = { std = "+busted" }

---------------------------------------------------------------- per-file exceptions

-- LuaCATS stubs: every parameter documents a C binding's argument; the
-- bodies are empty on purpose (the file runs nothing).
files["lua/oops/meta.lua"] = { unused_args = false }

-- Operators write hooks with the full documented signature
-- (on_transition(p, from, to, message)) and use what they need.
for _, glob in ipairs(policy_files) do
  files[glob].unused_args = false
end

-- Policies that break the policy language on purpose: the specs assert that
-- the loader refuses exactly what luacheck would report here (an unknown
-- global, io, string.dump, _ENV, a local leaking between files, ...).
for _, path in ipairs({
  "tests/spec/fixtures/policies/bad_global/policy.lua",
  "tests/spec/fixtures/policies/escape/probe.lua",
  "tests/spec/fixtures/policies/hooks_late/hooks.lua",
  "tests/spec/fixtures/policies/isolation/a.lua",
  "tests/spec/fixtures/policies/isolation/b.lua",
  "tests/spec/fixtures/policies/multi_error/c.lua",
}) do
  files[path] = { std = "policy", ignore = { "1..", "2..", "3.." } }
end
