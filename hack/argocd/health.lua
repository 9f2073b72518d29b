-- Argo CD health check for telo.run/TeloSession (resource.customizations.health.telo.run_TeloSession
-- in argocd-cm; README.md "GitOps"). Argo CD runs it with gopher-lua, so it keeps to Lua 5.1:
-- `obj` is the live object, the result a table {status, message}.
--
--   Running, Succeeded          -> Healthy
--   Running with a TCP port not reachable yet (AppReachable=False, Stalled=False) -> Progressing
--   Failed, or Stalled=True     -> Degraded (the session's reason and actionable message), also
--                                  while Running (a port that stays unreachable: AppUnreachable;
--                                  a refused Service: ServiceRejected, issue 17)
--   Running, not Ready, a reason (a write refused and retried: 429, 5xx) -> Progressing
--   Stopped (spec.stopped)      -> Suspended
--   Pending, Building, Provisioning, no status yet, or a status older than the spec
--   (observedGeneration < generation) -> Progressing
--   Pending with reason SessionLimit (waiting for a slot under the operator's session limits,
--   Stalled=False) -> Progressing, with the limit and the place in line
-- The same statuses carry kstatus' Ready/Reconciling/Stalled conditions, so Flux needs no script.
local hs = {}

local function condition(status, kind)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function with_reason(status, text)
  if status.reason ~= nil and status.reason ~= "" then
    text = status.reason .. ": " .. text
  end
  return text
end

local status = obj.status
if status == nil or status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to pick the session up"
  return hs
end

local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local phase = status.phase
local message = status.message or ""
local stalled = condition(status, "Stalled")

local reachable = condition(status, "AppReachable")
local ready = condition(status, "Ready")
local reason = status.reason or ""

if phase == "Running" and stalled ~= nil and stalled.status == "True" then
  -- Running, but a declared TCP port never accepted a connection (AppUnreachable), or a child
  -- the API server refuses (PodRejected ... BuildJobRejected): not going to get better until
  -- something changes.
  hs.status = "Degraded"
  hs.message = with_reason(status, message)
elseif phase == "Running" and ready ~= nil and ready.status == "False" and reason ~= "" then
  hs.status = "Progressing"
  hs.message = with_reason(status, message)
elseif phase == "Running" and reachable ~= nil and reachable.status == "False" then
  hs.status = "Progressing"
  hs.message = "Running: " .. (reachable.message or "waiting for its ports")
elseif phase == "Running" then
  hs.status = "Healthy"
  hs.message = "Running"
  if status.endpoints ~= nil and status.endpoints[1] ~= nil and status.endpoints[1].url ~= nil then
    hs.message = "Running at " .. status.endpoints[1].url
  end
elseif phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = "The app exited with code 0"
elseif phase == "Failed" then
  hs.status = "Degraded"
  hs.message = with_reason(status, message)
elseif phase == "Stopped" then
  hs.status = "Suspended"
  hs.message = "Stopped by spec.stopped"
elseif stalled ~= nil and stalled.status == "True" then
  -- Blocked on something the user must fix (a missing bundle ConfigMap): not going to finish.
  hs.status = "Degraded"
  hs.message = with_reason(status, message)
elseif phase == "Pending" or phase == "Building" or phase == "Provisioning" then
  hs.status = "Progressing"
  if status.reason == "SessionLimit" then
    hs.message = with_reason(status, message)
  elseif status.progress ~= nil and status.progress.message ~= nil then
    hs.message = phase .. ": " .. status.progress.message
  else
    hs.message = phase
  end
else
  hs.status = "Unknown"
  hs.message = "Unknown phase " .. tostring(phase)
end
return hs
