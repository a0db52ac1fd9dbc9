"""Pod status pieces as the kubelet writes them (shared by the playing and the running mode)."""

from __future__ import annotations

import datetime
from typing import Any

Obj = dict[str, Any]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def container_status(container: Obj, state: Obj, started: bool) -> Obj:
    """One containerStatuses entry as the kubelet writes it."""
    running = "running" in state
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": "" if "waiting" in state else f"fake://{container.get('image', '')}",
        "containerID": "" if "waiting" in state else f"fake://{container['name']}",
        "ready": running,
        "started": running or started,
        "restartCount": 0,
        "state": state,
    }


def terminated(exit_code: int, reason: str, message: str, started_at: str) -> Obj:
    state = {"exitCode": exit_code, "reason": reason, "startedAt": started_at,
             "finishedAt": _now(), "containerID": "fake://c"}  # fmt: skip
    if message:
        state["message"] = message
    return {"terminated": state}
