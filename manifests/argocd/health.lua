-- Argo CD health of the orchestrator.dev kinds (Fleet, Task, Service, DevEnvironment), read from the conditions
-- the orchestrator writes as kstatus reads them (so Flux and Argo CD agree): Stalled is Degraded (kstatus's Failed),
-- Reconciling, an unobserved generation or Ready=False is Progressing (InProgress), and Ready=True is Healthy (Current).
local health = {}
local generation = obj.metadata.generation
if obj.status == nil or obj.status.observedGeneration == nil
    or (generation ~= nil and obj.status.observedGeneration < generation) then
  health.status = "Progressing"
  health.message = "Waiting for the orchestrator to apply this generation"
  return health
end
local conditions = {}
for _, condition in ipairs(obj.status.conditions or {}) do
  conditions[condition.type] = condition
end
local function said(condition)
  return condition.reason .. ": " .. condition.message
end
if conditions.Stalled ~= nil and conditions.Stalled.status == "True" then
  health.status = "Degraded"
  health.message = said(conditions.Stalled)
elseif conditions.Reconciling ~= nil and conditions.Reconciling.status == "True" then
  health.status = "Progressing"
  health.message = said(conditions.Reconciling)
elseif conditions.Ready ~= nil and conditions.Ready.status == "True" then
  health.status = "Healthy"
  health.message = said(conditions.Ready)
elseif conditions.Ready ~= nil then
  health.status = "Progressing"
  health.message = said(conditions.Ready)
else
  health.status = "Progressing"
  health.message = "Waiting for the orchestrator's status"
end
return health
