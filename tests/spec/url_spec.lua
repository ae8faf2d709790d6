-- oops.url.show: a policy's URL as others see it (the fleet page, logs,
-- policy errors): scheme and host only, never a secret (issue 22).
local url = require("oops.url")

describe("oops.url.show", function()
  it("shows the scheme and host[:port], the rest masked", function()
    local cases = {
      { "https://hooks.slack.com/services/T000/B000/XXXXSECRET", "https://hooks.slack.com/***" },
      { "http://user:secret@127.0.0.1:9000/hook", "http://127.0.0.1:9000/***" },
      { "http://user:p%40ss@hooks.example", "http://hooks.example" },
      { "http://user@hooks.example/", "http://hooks.example/" },
      { "HTTPS://Hooks.Example:8443?token=SECRET", "https://Hooks.Example:8443/***" },
      { "https://hooks.example#SECRET", "https://hooks.example/***" },
      { "http://[::1]:7070/SECRET", "http://[::1]:7070/***" },
      { "http://u:a@b@hooks.example/x", "http://hooks.example/***" },
      -- the userinfo cannot be told from the path: the host is masked too
      { "http://u:se/cret@hooks.example/x", "http://***/***" },
      { "http://u:se?cret@hooks.example", "http://***/***" },
      { "http://u:se#cret@hooks.example", "http://***/***" },
      { "https://hooks.example/a@SECRET", "https://***/***" },
      -- not a host
      { "http://", "http://***" },
      { "http:///SECRET", "http://***/***" },
      { "http://ho st/SECRET", "http://***/***" },
      { "http://ho\nst", "http://***" },
      { "http://" .. ("a"):rep(300) .. "/x", "http://***/***" },
      -- not a URL at all (a policy error shows it): no scheme, same rules
      { "hooks.example/services/SECRET", "hooks.example/***" },
      { "user:SECRET@hooks.example", "hooks.example" },
      { "", "***" },
    }
    for _, c in ipairs(cases) do
      assert.are.equal(c[2], url.show(c[1]), c[1])
    end
    assert.are.equal("***", url.show(nil))
    assert.are.equal("***", url.show(42))
  end)

  it("never shows a byte of the userinfo, path, query or fragment", function()
    math.randomseed(22)
    local alphabet = "abcXYZ019:@/?#%[]._~-"
    for _ = 1, 2000 do
      local n = math.random(0, 24)
      local t = {}
      for i = 1, n do
        local k = math.random(#alphabet)
        t[i] = alphabet:sub(k, k)
      end
      local secret = "S3CR3T" .. table.concat(t)
      for _, u in ipairs({ "http://u:" .. secret .. "@h.example/p", "http://h.example/" .. secret,
        "http://h.example?" .. secret, "http://h.example#" .. secret, "http://" .. secret .. "@h.example" }) do
        local shown = url.show(u)
        assert.is_nil(shown:find("S3CR3T", 1, true), u .. " -> " .. shown)
      end
    end
  end)
end)
