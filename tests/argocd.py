"""Argo CD's Lua health checks, run the way Argo CD runs them, and its health_test.yaml format.

Argo CD (util/lua/lua.go, `runLua`) runs a health script with gopher-lua (Lua 5.1) created with
SkipOpenLibs and then opens only `package`, the base library, `table` and a "safe" `os`
(time/date); the script is a chunk with the object as the global `obj`. So `string.format`,
`("x"):upper()`, `math.floor` all fail there. `restricted_runtime` builds that environment in
lupa's Lua 5.1: a chunk whose environment holds only those names, and strings without methods.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lupa.lua51
import yaml

REPO = Path(__file__).resolve().parents[1]
ARGOCD = REPO / "deploy" / "argocd"
#: Argo CD's resource_customizations/<group>/<kind>/ layout, so the folder can go upstream as is.
CUSTOMIZATION = ARGOCD / "resource_customizations" / "trainium.dev" / "TrainiumJob"
HEALTH_LUA = CUSTOMIZATION / "health.lua"
HEALTH_TEST = CUSTOMIZATION / "health_test.yaml"
Obj = dict[str, Any]

#: gopher-lua's base library (baselib.go), what OpenBase registers.
BASE = [
    "assert", "collectgarbage", "dofile", "error", "getfenv", "getmetatable", "load", "loadfile",
    "loadstring", "next", "pcall", "print", "rawequal", "rawget", "rawset", "select", "setfenv",
    "setmetatable", "tonumber", "tostring", "type", "unpack", "xpcall", "module", "require",
    "newproxy", "ipairs", "pairs", "_VERSION",
]  # fmt: skip
#: Argo CD's safe os library (util/lua/oslib_safe.go): time and date only.
SAFE_OS = ("time", "date")

_SANDBOX = """
local base, safe_os, script = ...
local env = {}
for _, name in ipairs(base) do env[name] = _G[name] end
env.table = {}
for k, v in pairs(table) do env.table[k] = v end
env.os = {}
for _, name in ipairs(safe_os) do env.os[name] = os[name] end
env._G = env
getmetatable("").__index = nil  -- no string library: no ("x"):format(...)
local chunk, err = loadstring(script, "=health.lua")
if chunk == nil then error(err) end
return function(obj)
  env.obj = obj
  setfenv(chunk, env)
  return chunk()
end
"""


def restricted_runtime(script: str) -> Any:
    """A function obj -> health table, running script with only Argo CD's libraries open."""
    rt = lupa.lua51.LuaRuntime(unpack_returned_tuples=True)
    assert rt.eval("_VERSION") == "Lua 5.1"
    as_table = rt.table_from
    run = rt.execute(_SANDBOX, as_table(BASE), as_table(SAFE_OS), script)

    def health(obj: Obj) -> dict[str, str]:
        result = run(as_table(obj, recursive=True))
        return dict(result) if result is not None else {}

    return health


def health(obj: Obj, script: str | None = None) -> dict[str, str]:
    """The health Argo CD would report for obj with health.lua (or another script)."""
    return restricted_runtime(script or HEALTH_LUA.read_text())(obj)


def health_tests() -> list[tuple[Obj, dict[str, str], str]]:
    """(object, expected healthStatus, inputPath) of each case in health_test.yaml."""
    cases = yaml.safe_load(HEALTH_TEST.read_text())["tests"]
    return [
        (yaml.safe_load((CUSTOMIZATION / c["inputPath"]).read_text()), c["healthStatus"],
         c["inputPath"])
        for c in cases
    ]  # fmt: skip
