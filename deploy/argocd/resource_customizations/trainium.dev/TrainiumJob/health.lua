-- Argo CD health of a trainium.dev TrainiumJob, from status.phase (set by the operator).
-- Edit this file, never argocd-cm.yaml: that embeds a copy, and tests/deploy/test_argocd.py
-- fails when the copy differs. Lua 5.1 as Argo CD runs it (gopher-lua, only the base, table and
-- safe os libraries: no string.*, no ("x"):method()); `obj` is the live object.
local hs = {}

-- The Failed condition's message says why; fall back to status.message.
local function failed_message(status)
  if status.conditions ~= nil then
    for _, c in ipairs(status.conditions) do
      if c.type == "Failed" and c.status == "True" and c.message ~= nil then
        return c.message
      end
    end
  end
  return status.message or "TrainiumJob failed"
end

-- "step 400/1000 (40%), ETA 14m" from status.progress (rank 0's metrics), or nil.
local function progress_text(status)
  local p = status.progress
  if p == nil or p.step == nil or p.display == nil then
    return nil
  end
  local text = "step " .. p.display
  if p.eta ~= nil and p.eta ~= "-" then
    text = text .. ", ETA " .. p.eta
  end
  return text
end

local status = obj.status
if status == nil or status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to pick up the job"
  return hs
end

local phase = status.phase
local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and status.observedGeneration ~= nil
    and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "The operator has not yet seen the latest spec"
elseif phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = status.message or "Training finished"
elseif phase == "Failed" then
  hs.status = "Degraded"
  hs.message = failed_message(status)
elseif phase == "Suspended" then
  hs.status = "Suspended"
  hs.message = status.message or "Suspended"
elseif phase == "Pending" or phase == "WaitingForCache" or phase == "Precompiling"
    or phase == "Training" then
  hs.status = "Progressing"
  hs.message = status.message or phase
  local progress = progress_text(status)
  if phase == "Training" and progress ~= nil then
    hs.message = hs.message .. " (" .. progress .. ")"
  end
else
  -- A phase this script predates: say so instead of guessing.
  hs.status = "Unknown"
  hs.message = "Unknown phase " .. tostring(phase)
end
return hs
