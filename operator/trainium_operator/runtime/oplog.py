"""The operator's own log: one line per job phase transition, none per health probe.

kopf sets up the process's logging (`--log-format`: its text formats, or JSON through
python-json-logger on the root handler), and our loggers propagate to it: in JSON each line is
one object, and a transition's fields (`extra`) are keys of their own.
"""

from __future__ import annotations

import logging

import kopf

from trainium_operator.cluster.report import Transition

log = logging.getLogger("trainium_operator.jobs")
#: from_phase of a job's first transition, as the transitions metric says it.
NEW = "New"
#: kopf's formats by our names: "text" is kopf's full format.
FORMATS = {"text": "FULL", "full": "FULL", "plain": "PLAIN", "json": "JSON"}


def transition(uid: str, moved: Transition) -> None:
    """One INFO line: namespace/name, uid, from -> to, reason (JSON: each a key).

    The reason is what holds the job, when something does (QueueNotFound), else the reason of
    the transition's Event (OOMKilled, Completed).
    """
    old, reason = moved.old_phase or NEW, moved.blocker or moved.reason
    fields = {
        "job": f"{moved.namespace}/{moved.name}", "uid": uid, "from_phase": old,
        "to_phase": moved.new_phase, "reason": reason,
    }  # fmt: skip
    log.info("job %s (uid %s): %s -> %s (%s)", fields["job"], uid, old, moved.new_phase,
             reason, extra=fields)  # fmt: skip


def configure(
    level: str | None, log_format: str | None, refkey: str | None, prefix: bool | None
) -> None:
    """kopf's logging as `kopf run` will set it, already now (a start-up error is one such
    line); the liveness endpoint's access line per probe only in debug (13,000 a day)."""
    kopf.configure(
        debug=level == "debug", verbose=level == "verbose", quiet=level == "quiet",
        log_format=kopf.LogFormat[FORMATS[log_format or "full"]], log_refkey=refkey,
        log_prefix=prefix,
    )  # fmt: skip
    access = logging.getLogger("aiohttp.access")  # aiohttp's documented access logger
    access.setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
