-- oops.url: how a URL from a policy is shown where others read it — the
-- fleet page (/api/fleet), the logs, a policy error (/healthz, /status).
-- A webhook's secret may sit anywhere but the scheme and the host: in the
-- userinfo (http://user:secret@host), the path (Slack-style
-- /services/T000/B000/SECRET), the query (?token=...) or the fragment. So
-- only the scheme and host[:port] are shown, the rest as "/***":
--
--   show("https://user:pw@hooks.example:8443/services/T0/B0/XYZ?x=1")
--     --> "https://hooks.example:8443/***"
--
-- An '@' after the host part means the userinfo cannot be told from the
-- path (a password holding an unencoded '/', '?' or '#' ends the host part
-- early, by RFC 3986, and then shows as a "host"): the host is masked too
-- ("https://***/***"). So is a host part with anything but letters, digits,
-- "-._~%" and the "[]:" of an IPv6 literal and a port, or longer than 262
-- bytes. Pure; never raises.
local M = {}

local HOST_MAX = 262 -- a 253-byte name, ':' and a 5-digit port, brackets spare

function M.show(u)
  if type(u) ~= "string" then return "***" end
  local scheme, rest = u:match("^(%a[%w+.%-]*)://(.*)$")
  if not scheme or #scheme > 16 then scheme, rest = nil, u end
  local host, tail = rest:match("^([^/?#]*)(.*)$")
  local at = host:match(".*()@")
  if at then host = host:sub(at + 1) end
  if tail:find("@", 1, true) or host == "" or #host > HOST_MAX or not host:match("^[%w%-._~%%%[%]:]+$") then
    host = "***"
  end
  local shown = (scheme and scheme:lower() .. "://" or "") .. host
  if tail ~= "" and tail ~= "/" then return shown .. "/***" end
  return shown .. tail
end

return M
