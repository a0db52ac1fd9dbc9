"""Pure: a training gang's spare pods (spec.spares): the Volcano job's `spare` task.

The spare task is the training task's pod (same image, resources, devices, preflight, placement,
excluded nodes), so a spare's node is one a training pod could run on, but its container stands
by (`python -m trainium_trainer standby`) instead of joining torchrun's world. The job's
minAvailable counts the spares it reserves (domain/spares.py), and so does the Kueue Workload,
whose pod count is the sum of the tasks' replicas (workload.pod_set).

A spare pod's failure or loss restarts nothing (the task has no policies: Volcano recreates a
missing pod, Pending until a node has room: the replacement spare); the gang completes when its
training task does (TaskCompleted -> CompleteJob), its spares stopped with it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from trainium_operator.api.crd import GROUP
from trainium_operator.api.spec import TrainiumJobSpec
from trainium_operator.domain import spares
from trainium_trainer import contract

Json = dict[str, Any]
#: The pod label that tells a spare's pod from a training pod (value ROLE_SPARE).
LABEL_ROLE = f"{GROUP}/role"
ROLE_SPARE = "spare"
#: Where the spare task is in the Volcano job's tasks (after the training task).
SPARE_TASK_INDEX = 1
#: Volcano's policy that completes the job when the training task's pods all succeeded.
COMPLETE_ON_TRAINING: Json = {"event": "TaskCompleted", "action": "CompleteJob"}


def standby_command() -> list[str]:
    """What a spare's container runs (no shell): the trainer's standby subcommand."""
    return ["python3", "-m", contract.DEFAULT_MODULE, contract.STANDBY_COMMAND]


def with_spares(vcjob: Json, spec: TrainiumJobSpec, reserved: int | None = None) -> Json:
    """The training gang's Volcano job with spec.spares standby pods beside its training pods;
    reserved: the spares its minAvailable counts (None: all of them)."""
    if spec.spares == 0:
        return vcjob
    out = copy.deepcopy(vcjob)
    (training,) = out["spec"]["tasks"]
    training["policies"] = [*(training.get("policies") or ()), dict(COMPLETE_ON_TRAINING)]
    out["spec"]["tasks"] = [training, spare_task(training, spec, reserved)]
    out["spec"]["minAvailable"] = spares.gang_min(spec, reserved)
    return out


def spare_task(training: Mapping[str, Any], spec: TrainiumJobSpec, reserved: int | None) -> Json:
    """The `spare` task: the training task's pod, standing by; spec.spares replicas."""
    task = copy.deepcopy(dict(training))
    task.pop("policies", None)
    kept = spares.gang_min(spec, reserved) - spec.nodes
    task.update(name=spares.SPARE_TASK, replicas=spec.spares, minAvailable=kept)
    pod = task["template"]
    pod["metadata"].setdefault("labels", {})[LABEL_ROLE] = ROLE_SPARE
    for container in pod["spec"]["containers"]:
        container["command"] = standby_command()
        container.pop("args", None)
        container.pop("ports", None)  # a spare serves no trainer metrics
        # A spare is no node of the world: no node index (its task's would read 0, rank 0's).
        container["env"] = [
            e for e in container.get("env") or () if e.get("name") != contract.ENV_NODE_INDEX
        ]
    return task


def is_spare(pod: Mapping[str, Any]) -> bool:
    """Whether a gang pod is a spare's (its role label)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_ROLE) == ROLE_SPARE
