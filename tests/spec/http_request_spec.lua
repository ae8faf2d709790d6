-- oops.http.request's options through the real binary (`oopsd lua busted ...`):
-- max_body and truncate, userinfo, ca (a private CA, against `openssl
-- s_server`), timeouts and kept connections. See lua/oops/meta.lua; the C
-- client underneath is tests/unit/test_http_client.c's.
local oops = require("oops")

local function raises(text, fn, ...)
  local ok, err = pcall(fn, ...)
  assert(not ok, "expected an error containing '" .. text .. "', but the call returned")
  err = tostring(err)
  assert(err:find(text, 1, true), "expected an error containing '" .. text .. "', got: " .. err)
  return err
end

local function request(opts)
  opts.timeout_ms = opts.timeout_ms or 10000
  return oops.wait(function() return oops.http.request(opts) end)
end

-- A server whose handler records each request and answers with `answer(req)`.
local function recording_server(answer)
  local seen = {}
  local srv = assert(oops.http.serve { handler = function(req)
    seen[#seen + 1] = req
    return answer(req)
  end })
  return srv, seen
end

-- sh -c SCRIPT in a task; its result, which must be a success.
local function sh(script)
  local r = oops.wait(function()
    return oops.proc.run { argv = { "sh", "-c", script }, timeout_ms = 60000 }
  end)
  assert(r and r.ok, "sh failed: " .. (r and r.stderr or "did not start"))
  return r
end

describe("oops.http.request max_body and truncate", function()
  local srv, seen
  setup(function()
    srv, seen = recording_server(function(req)
      local n = tonumber(req.path:match("^/(%d+)$")) or 0
      return req.method == "POST" and 202 or 200, string.rep("x", n)
    end)
  end)
  teardown(function() srv:close() end)

  it("fails a body past max_body by default, as before", function()
    local r, err, name = request { url = srv:url() .. "/5000", max_body = 1000 }
    assert.is_nil(r)
    assert.are.equal("response body exceeds 1000 bytes", err)
    assert.are.equal("io", name)
  end)

  it("with truncate, returns the status and the first max_body bytes, truncated = true", function()
    local r = assert(request { url = srv:url() .. "/5000", method = "POST", body = "{}", max_body = 1000,
                               truncate = true })
    assert.are.equal(202, r.status)
    assert.are.equal(string.rep("x", 1000), r.body)
    assert.is_true(r.truncated)
    assert.are.equal("{}", seen[#seen].body)
  end)

  it("says truncated = false for a body that fits", function()
    local exact = assert(request { url = srv:url() .. "/1000", max_body = 1000, truncate = true })
    assert.are.equal(1000, #exact.body)
    assert.is_false(exact.truncated)
    local small = assert(request { url = srv:url() .. "/3" })
    assert.are.equal("xxx", small.body)
    assert.is_false(small.truncated)
  end)

  it("raises for a max_body or truncate of the wrong type", function()
    local url = srv:url()
    oops.wait(function()
      raises("max_body must be a whole number of bytes from 1 to 67108864", oops.http.request,
             { url = url, max_body = 0 })
      raises("max_body must be", oops.http.request, { url = url, max_body = 1.5 })
      raises("max_body must be", oops.http.request, { url = url, max_body = 64 * 1024 * 1024 + 1 })
      raises("truncate must be true or false, not a string", oops.http.request, { url = url, truncate = "yes" })
      raises("allow_userinfo must be true or false", oops.http.request, { url = url, allow_userinfo = 1 })
    end)
  end)
end)

describe("oops.http.request userinfo", function()
  it("refuses a URL with user:password@, never showing them", function()
    local srv, seen = recording_server(function() return 204 end)
    local url = srv:url():gsub("^http://", "http://hookuser:SECRET-PW@") .. "/hook"
    local r, err, name = request { url = url, method = "POST", body = "{}" }
    assert.is_nil(r)
    assert.are.equal("invalid", name)
    assert.truthy(err:find("URL with userinfo refused (http://***@127.0.0.1:" .. srv:port() .. ")", 1, true), err)
    assert.is_nil(err:find("hookuser", 1, true), err)
    assert.is_nil(err:find("SECRET", 1, true), err)
    assert.are.equal(0, #seen)
    srv:close()
  end)

  it("sends it as Basic authentication with allow_userinfo = true", function()
    local srv, seen = recording_server(function() return 204 end)
    local url = srv:url():gsub("^http://", "http://hookuser:pw@") .. "/hook"
    local r = assert(request { url = url, allow_userinfo = true })
    srv:close()
    assert.are.equal(204, r.status)
    assert.are.equal("Basic aG9va3VzZXI6cHc=", seen[1].headers.authorization)
  end)
end)

describe("oops.http.request ca", function()
  local dir
  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    -- A CA, another CA, and a certificate for IP 127.0.0.1 only signed by the first.
    sh(([[set -e; mkdir -m 700 '%s'; cd '%s'; k='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'
for ca in ca other; do openssl req -x509 $k -days 2 -subj "/CN=oops spec $ca" \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
  -keyout $ca.key -out $ca.pem 2>/dev/null; done
openssl req -new $k -subj /CN=127.0.0.1 -keyout server.key -out server.csr 2>/dev/null
printf '%%s\n' basicConstraints=CA:FALSE extendedKeyUsage=serverAuth subjectAltName=IP:127.0.0.1 >server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out server.pem \
  -extfile server.ext 2>/dev/null]]):format(dir, dir))
  end)
  teardown(function() sh(("rm -rf '%s'"):format(dir)) end)

  -- openssl s_server -www (answers "HTTP/1.0 200 ok") on a port of its own.
  local function tls_receiver()
    local box = { out = "" }
    box.h = assert(oops.proc.start {
      argv = { "openssl", "s_server", "-accept", "127.0.0.1:0", "-cert", dir .. "/server.pem",
               "-key", dir .. "/server.key", "-www" },
      on_output = function(_, data) box.out = box.out .. data end,
      on_exit = function() box.exited = true end,
    })
    oops.wait(function()
      local deadline = oops.now_ms() + 10000
      while not box.out:find("ACCEPT 127.0.0.1:%d+") and not box.exited and oops.now_ms() < deadline do
        oops.sleep(10)
      end
    end)
    finally(function() box.h:kill(9) end) -- the test fails or not
    box.port = tonumber(box.out:match("ACCEPT 127%.0%.0%.1:(%d+)"))
    assert(box.port, "openssl s_server did not start: " .. box.out)
    return box
  end

  it("accepts a receiver signed by the CA given, refuses it without, by another CA, or by a wrong name", function()
    local rx = tls_receiver()
    local ip = ("https://127.0.0.1:%d/"):format(rx.port)
    local ok, err0 = request { url = ip, ca = dir .. "/ca.pem" }
    local system, err1, name1 = request { url = ip }
    local other, err2 = request { url = ip, ca = dir .. "/other.pem" }
    local wrong, err3 = request { url = ("https://localhost:%d/"):format(rx.port), ca = dir .. "/ca.pem" }
    assert(ok, "refused with the CA: " .. tostring(err0))
    assert.are.equal(200, ok.status)
    assert.is_nil(system)
    assert.are.equal("io", name1)
    local want1 = "TLS certificate of 127.0.0.1:" .. rx.port .. " refused (system CA store): "
    assert.truthy(err1:find(want1, 1, true), err1)
    assert.is_nil(other)
    assert.truthy(err2:find("refused (CA file given): SSL certificate problem", 1, true), err2)
    assert.is_nil(wrong)
    assert.truthy(err3:find("TLS certificate of localhost:" .. rx.port .. " refused (CA file given)", 1, true), err3)
    assert.truthy(err3:find("'localhost'", 1, true), err3)
  end)

  it("says when the CA file cannot be read, when the request is made", function()
    local r, err, name = request { url = "https://127.0.0.1:9/", ca = dir .. "/nothing.pem" }
    assert.is_nil(r)
    assert.are.equal("cannot read CA file " .. dir .. "/nothing.pem: No such file or directory", err)
    assert.are.equal("invalid", name)
    for ca, want in pairs {
      [dir] = "cannot read CA file " .. dir .. ": not a regular file",
      ["/" .. string.rep("a", 4095)] = "CA file: path longer than 4095 bytes",
      [dir .. "/ca.pem\0x"] = "CA file: path contains a NUL byte",
    } do
      r, err, name = request { url = "https://127.0.0.1:9/", ca = ca }
      assert.is_nil(r)
      assert.are.equal(want, err)
      assert.are.equal("invalid", name)
    end
    oops.wait(function()
      raises("ca must be a string (a PEM file's path), not a boolean", oops.http.request,
             { url = "https://127.0.0.1:9/", ca = true })
    end)
  end)

  it("cuts a receiver that accepted and went silent at timeout_ms, TLS handshake or HTTP answer", function()
    local rx = tls_receiver()
    rx.h:kill(19) -- SIGSTOP: the kernel still accepts connections, nothing answers
    local t0 = oops.now_ms()
    local tls, err1, name1 = request { url = ("https://127.0.0.1:%d/"):format(rx.port), ca = dir .. "/ca.pem",
                                       timeout_ms = 300 }
    local plain, err2 = request { url = ("http://127.0.0.1:%d/"):format(rx.port), method = "POST", body = "{}",
                                  timeout_ms = 300, truncate = true }
    local took = oops.now_ms() - t0
    assert.is_nil(tls)
    assert.are.equal("timed out after 300 ms", err1)
    assert.are.equal("io", name1)
    assert.is_nil(plain)
    assert.are.equal("timed out after 300 ms", err2)
    assert.is_true(took >= 590 and took < 10000, took)
  end)
end)
