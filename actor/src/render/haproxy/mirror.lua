-- RequestMirror on HAProxy (Gateway API), written by k8slb-actor next to haproxy.cfg:
-- do not edit. HAProxy has no request mirroring of its own; this is the whole of it.
--
-- `http-request lua.k8slb_mirror <backend> <share>` (render/haproxy/http.rs, HpLine::Mirror)
-- makes a copy of the request as the client sent it (method, path and query, headers,
-- body) and hands it to a task of its own, which sends it to the frontend `k8slb_mirror`
-- on the unix socket SOCKET (templates/haproxy-routes.cfg.tera: mode 600, in the
-- actor's hop directory, whose path the actor writes here: render/haproxy/http.rs,
-- mirror_lua; never an abstract socket, which any process of the node could reach); that
-- frontend sends it to <backend> (a route backend, `rtb_*`), chosen by the header
-- `k8slb-mirror`, as any request: its servers, health checks and TLS. The answer is read
-- and dropped. The request itself never waits for its copy, and nothing here can fail
-- it: a runtime error only costs the copy.
--
-- <share>: the share of the requests copied, in hundredths of a percent (10000: every
-- request), each request drawn at random (independently of a weighted split's draw).
--
-- Not copied (each counted; the count is logged at every power of two):
-- - a request whose body HAProxy does not hold whole when the route is chosen (a body
--   still arriving, larger than HAProxy's buffer, or chunked): waiting for it would
--   delay the request, and HAProxy answers 408 to a body slower than its wait;
-- - beyond MAX_IN_FLIGHT copies under way (a slow mirror backend), so the copies held
--   in memory stay bounded (each at most one buffer, 16 kB by default).

local SOCKET = "@K8SLB_MIRROR_SOCKET@"
local MAX_IN_FLIGHT = 1024
local TIMEOUT_S = 30

local in_flight = 0
local not_sent = 0

local function not_copied(why)
  not_sent = not_sent + 1
  if not_sent & (not_sent - 1) == 0 then
    core.Warning("k8slb RequestMirror: " .. not_sent .. " copies not sent so far (the last: " .. why .. ")")
  end
end

local function send(copy)
  local s = core.tcp()
  s:settimeout(TIMEOUT_S)
  if s:connect(SOCKET) and s:send(copy) then
    while s:receive(16384) do end
  end
  s:close()
end

-- The proxy's own headers (hop-by-hop, the framing, the frontend's choice).
local NOT_COPIED = {
  ["connection"] = true, ["keep-alive"] = true, ["proxy-connection"] = true,
  ["transfer-encoding"] = true, ["te"] = true, ["upgrade"] = true,
  ["content-length"] = true, ["k8slb-mirror"] = true,
}

core.register_action("k8slb_mirror", { "http-req" }, function(txn, backend, share)
  local s = tonumber(share)
  if s == nil or (s < 10000 and math.random(10000) > s) then
    return
  end
  if in_flight >= MAX_IN_FLIGHT then
    return not_copied("too many copies under way")
  end
  local body = ""
  if txn.f:req_fhdr_cnt("transfer-encoding") > 0 then
    return not_copied("a chunked body")
  end
  if txn.f:req_fhdr_cnt("content-length") > 0 then
    body = txn.sf:req_body() or ""
    if #body ~= tonumber(txn.sf:req_fhdr("content-length")) then
      return not_copied("a body not held whole")
    end
  end
  local out = { txn.sf:method(), " ", txn.sf:pathq(), " HTTP/1.1\r\n" }
  for name, values in pairs(txn.http:req_get_headers()) do
    if not NOT_COPIED[name] then
      for i = 0, #values do
        if values[i] ~= nil then
          out[#out + 1] = name .. ": " .. values[i] .. "\r\n"
        end
      end
    end
  end
  -- As the frontend's `option forwardfor` adds it to the request itself.
  out[#out + 1] = "x-forwarded-for: " .. txn.sf:src() .. "\r\n"
  out[#out + 1] = "k8slb-mirror: " .. backend .. "\r\ncontent-length: " .. #body
    .. "\r\nconnection: close\r\n\r\n"
  out[#out + 1] = body
  local copy = table.concat(out)
  in_flight = in_flight + 1
  core.register_task(function()
    pcall(send, copy)
    in_flight = in_flight - 1
  end)
end, 2)
