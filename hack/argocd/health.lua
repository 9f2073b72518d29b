-- Argo CD health check for telo.run/TeloSession (resource.customizations.health.telo.run_TeloSession
-- in argocd-cm; README.md "GitOps"). Argo CD runs it with gopher-lua, so it keeps to Lua 5.1:
-- `obj` is the live object, the result a table {status, message}.
--
--   Running, Succeeded          -> Healthy
--   Failed, or Stalled=True     -> Degraded (the session's reason and actionable message)
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

if phase == "Running" then
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
