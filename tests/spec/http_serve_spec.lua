-- oops.http.serve through the real binary (`oopsd lua busted ...`): requests
-- made with oops.http.request (and curl for what it cannot send or show)
-- reach the Lua handler, whose answer comes back. See lua/oops/meta.lua.
local oops = require("oops")

local OOPSD = "/proc/self/exe"

local function raises(text, fn, ...)
  local ok, err = pcall(fn, ...)
  assert(not ok, "expected an error containing '" .. text .. "', but the call returned")
  err = tostring(err)
  assert(err:find(text, 1, true), "expected an error containing '" .. text .. "', got: " .. err)
  return err
end

-- A server whose handler records each request and answers with `answer(req)`.
local function recording_server(answer, opts)
  local seen = {}
  opts = opts or {}
  opts.handler = function(req)
    seen[#seen + 1] = req
    return answer(req)
  end
  local srv = assert(oops.http.serve(opts))
  return srv, seen
end

local function post(url, body, headers)
  return oops.wait(function()
    return oops.http.request { url = url, method = "POST", body = body, headers = headers, timeout_ms = 10000 }
  end)
end

-- curl ARGS... as a child; its stdout.
local function curl(...)
  local argv = { "curl", "-s", "--noproxy", "*", "--max-time", "20", ... }
  local r = oops.wait(function()
    return oops.proc.run { argv = argv, timeout_ms = 30000 }
  end)
  assert(r, "curl did not start")
  assert.are.equal(0, r.status, "curl failed: " .. r.stderr)
  return r.stdout
end

local function write_temp(text)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

local function have_ipv6_loopback()
  local f = io.open("/proc/net/if_inet6")
  if not f then return false end
  local text = f:read("a")
  f:close()
  return text:find("^0+1 ") ~= nil or text:find("\n0+1 ") ~= nil
end

describe("oops.http.serve", function()
  it("listens on an IPv6 literal, and its url is one a client can use", function()
    if not have_ipv6_loopback() then return pending("no IPv6 loopback (::1) on this machine") end
    for _, listen in ipairs({ "[::1]:0", "[::]:0" }) do
      local srv = recording_server(function() return 200, "v6" end, { listen = listen })
      local url = srv:url()
      assert.matches("^http://%[::1%]:%d+$", url)
      assert.are.equal("v6", curl(url .. "/x"))
      srv:close()
    end
  end)

  it("hands a POST's method, path, body and lower-case headers to the handler and sends its answer", function()
    local srv, seen = recording_server(function(req) return 201, "got " .. req.body end)
    local res = assert(post(srv:url() .. "/hook?x=1", '{"id":"e1"}', {
      ["Content-Type"] = "application/json", ["X-Oops-Event-Id"] = "e1", "X-Oops-Server: s-1",
    }))
    srv:close()
    assert.are.equal(201, res.status)
    assert.are.equal('got {"id":"e1"}', res.body)
    assert.are.equal(1, #seen)
    local req = seen[1]
    assert.are.equal("POST", req.method)
    assert.are.equal("/hook", req.path)
    assert.are.equal('{"id":"e1"}', req.body)
    assert.are.equal("e1", req.headers["x-oops-event-id"])
    assert.are.equal("s-1", req.headers["x-oops-server"])
    assert.are.equal("application/json", req.headers["content-type"])
    assert.are.equal("11", req.headers["content-length"])
    assert.is_nil(req.headers["X-Oops-Event-Id"])
  end)

  it("answers GET with an empty body, binary bodies intact", function()
    local srv, seen = recording_server(function(req) return 200, req.body end)
    local res = assert(oops.wait(function()
      return oops.http.request { url = srv:url() .. "/a", timeout_ms = 10000 }
    end))
    local bin = "a\0b\255\0"
    local res2 = assert(post(srv:url() .. "/b", bin))
    srv:close()
    assert.are.equal(200, res.status)
    assert.are.equal("", res.body)
    assert.are.equal("GET", seen[1].method)
    assert.are.equal("", seen[1].body)
    assert.are.equal(bin, seen[2].body)
    assert.are.equal(bin, res2.body)
  end)

  it("sends the content type the handler gives, text/plain by default, and PUT bodies", function()
    local srv, seen = recording_server(function(req)
      if req.path == "/json" then return 200, "{}", "application/json" end
      return 202, "plain"
    end)
    local headers = curl("-D", "-", "-o", "/dev/null", srv:url() .. "/json")
    local put = curl("-X", "PUT", "--data-binary", "put body", "-w", " %{http_code} %{content_type}", srv:url() .. "/p")
    srv:close()
    assert.truthy(headers:lower():find("content-type: application/json", 1, true), headers)
    assert.are.equal("plain 202 text/plain; charset=utf-8", put)
    assert.are.equal("PUT", seen[2].method)
    assert.are.equal("put body", seen[2].body)
  end)

  it("answers 413 to a body over max_body without calling the handler", function()
    local srv, seen = recording_server(function() return 204 end, { max_body = 10 })
    local at = assert(post(srv:url() .. "/", "0123456789"))
    local over = assert(post(srv:url() .. "/", "0123456789+"))
    local file = write_temp(string.rep("z", 40))
    local chunked = curl("-H", "Transfer-Encoding: chunked", "-H", "Expect:", "--data-binary", "@" .. file,
                         "-o", "/dev/null", "-w", "%{http_code}", srv:url() .. "/")
    os.remove(file)
    srv:close()
    assert.are.equal(204, at.status)
    assert.are.equal(413, over.status)
    assert.are.equal("413", chunked)
    assert.are.equal(1, #seen)
    assert.are.equal("0123456789", seen[1].body)
  end)

  -- In a child, so the errors it logs on purpose are read, not printed.
  it("logs a handler's error or bad result, answers 500 and keeps serving", function()
    local path = write_temp([[
      local oops = require("oops")
      local srv = assert(oops.http.serve { handler = function(req)
        if req.path == "/boom" then error("boom on purpose") end
        if req.path == "/bad" then return "200" end
        if req.path == "/low" then return 101 end
        if req.path == "/wait" then oops.sleep(10) end
        if req.path == "/type" then return 200, "x", "two\nlines" end
        return 200, "fine\n"
      end })
      oops.wait(function()
        for _, p in ipairs { "/boom", "/bad", "/low", "/wait", "/type", "/fine" } do
          local res = assert(oops.http.request { url = srv:url() .. p, method = "POST", body = "x" })
          io.stdout:write(p, " ", res.status, " ", res.body) -- each body ends with a newline
        end
      end)
    ]])
    local r = assert(oops.wait(function()
      return oops.proc.run { argv = { OOPSD, "lua", path }, inherit_env = true, timeout_ms = 60000 }
    end))
    os.remove(path)
    assert.is_true(r.ok, r.stderr)
    local failed = "the handler failed; see the server's log\n"
    assert.are.equal("/boom 500 " .. failed .. "/bad 500 " .. failed .. "/low 500 " .. failed .. "/wait 500 " .. failed
      .. "/type 500 " .. failed .. "/fine 200 fine\n", r.stdout)
    for _, want in ipairs {
      'msg="HTTP handler for POST /boom failed: ', "boom on purpose",
      'msg="HTTP handler for POST /bad failed: the handler returned status 200: want an integer 200-599',
      'msg="HTTP handler for POST /low failed: the handler returned status 101: want an integer 200-599',
      'msg="HTTP handler for POST /wait failed: ', "oops.sleep waits, so it must be called from a task",
      'msg="HTTP handler for POST /type failed: the handler returned content type ',
    } do
      assert.truthy(r.stderr:find(want, 1, true), "no '" .. want .. "' in:\n" .. r.stderr)
    end
  end)

  it("port and url name the bound port; close stops listening and is idempotent", function()
    local srv = assert(oops.http.serve { listen = "localhost:0", handler = function() return 200, "up" end })
    local port = srv:port()
    assert.is_true(port > 0)
    assert.are.equal("http://127.0.0.1:" .. port, srv:url())
    assert.are.equal("up", assert(post(srv:url(), "")).body)
    srv:close()
    srv:close()
    assert.are.equal(port, srv:port())
    local res, err = post(srv:url(), "")
    assert.is_nil(res)
    assert.truthy(err:find(tostring(port), 1, true), err)
  end)

  it("may close its own server from the handler", function()
    local srv
    srv = assert(oops.http.serve { handler = function() srv:close(); return 200, "bye" end })
    post(srv:url(), "x") -- the response may or may not make it out
    local res = post(srv:url(), "x")
    assert.is_nil(res)
  end)

  it("is closed when garbage collected", function()
    local port
    do
      local srv = assert(oops.http.serve { handler = function() return 200 end })
      port = srv:port()
      assert.are.equal(200, assert(post("http://127.0.0.1:" .. port .. "/", "")).status)
    end
    collectgarbage()
    collectgarbage()
    local res = post("http://127.0.0.1:" .. port .. "/", "")
    assert.is_nil(res)
  end)

  it("returns nil and the reason when it cannot listen", function()
    local srv = assert(oops.http.serve { handler = function() return 200 end })
    local listen = "127.0.0.1:" .. srv:port()
    local again, err, code = oops.http.serve { listen = listen, handler = function() return 200 end }
    srv:close()
    assert.is_nil(again)
    assert.are.equal("cannot listen on " .. listen .. ": Address already in use", err)
    assert.are.equal("io", code)
    local bad, err2 = oops.http.serve { listen = "nonsense", handler = function() return 200 end }
    assert.is_nil(bad)
    assert.truthy(err2:find("cannot listen on nonsense: invalid address", 1, true), err2)
  end)

  it("raises on a caller's mistake", function()
    raises("bad argument #1", oops.http.serve, "127.0.0.1:0")
    raises("handler must be a function", oops.http.serve, {})
    raises("listen must be a string", oops.http.serve, { listen = 80, handler = print })
    raises("max_body must be a whole number", oops.http.serve, { max_body = 0, handler = print })
    raises("max_body must be a whole number", oops.http.serve, { max_body = 1.5, handler = print })
  end)

  it("does not keep a script running once its work is done", function()
    -- the script leaves the server open: `oopsd lua` must still end (and,
    -- under the sanitizers, without a leak)
    local path = write_temp([[
      local oops = require("oops")
      srv = assert(oops.http.serve { handler = function() return 200 end })
      oops.task("one request", function()
        local res = assert(oops.http.request { url = srv:url(), method = "POST", body = "x" })
        io.stdout:write(res.status, "\n")
      end)
    ]])
    local r = assert(oops.wait(function()
      return oops.proc.run { argv = { OOPSD, "lua", path }, inherit_env = true, timeout_ms = 60000 }
    end))
    os.remove(path)
    assert.is_false(r.timed_out)
    assert.is_true(r.ok, r.stderr)
    assert.are.equal("200\n", r.stdout)
  end)
end)
