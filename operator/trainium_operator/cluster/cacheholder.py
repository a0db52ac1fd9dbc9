"""Who fills a job's compile-cache entry: its record and Lease, or another job's live precompile.

One writer per entry (lifecycle: WaitingForCache): observe reads here whether this job, another
live one, or nobody compiles the entry the job's spec needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trainium_operator.api import naming
from trainium_operator.cluster import k8s, reads
from trainium_operator.cluster.reads import Kind, Reader, lookup
from trainium_operator.domain import lifecycle
from trainium_operator.domain.lifecycle import TERMINAL, Child
from trainium_operator.manifests import cache, ownership
from trainium_operator.manifests.ownership import Owner

Json = dict[str, Any]


def entry_and_holder(
    ident: cache.Identity, owner: Owner, policy: str, read: Reader
) -> tuple[cache.Entry | None, Json | None, str, str]:
    """The entry, its lease, and who holds it: "self", "other" (a live job) or "none"."""
    if policy == "Never":
        return None, None, "none", ""
    name = ident.record_name
    entry = cache.read_entry(read.get(Kind.RECORD, owner.namespace, name), ident)
    lease = read.get(Kind.LEASE, owner.namespace, name)
    who = cache.read_holder(lease)
    if who is None:
        return entry, lease, "none", ""
    if who == cache.holder(owner):
        return entry, lease, "self", ""
    ns, _sep, rest = who.partition("/")
    job, _sep, uid = rest.partition("/")
    return entry, lease, ("other" if _alive(ns, job, uid, read) else "none"), f"{ns}/{job}"


def compiling_elsewhere(
    ident: cache.Identity,
    owner: Owner,
    watched: Mapping[tuple[str, str], Iterable[Json]] | None = None,
    fresh: bool = False,
    size: int | None = None,
) -> tuple[str, str]:
    """Another job's live precompile of this entry, found by label: ("other", its job).

    The Lease says who compiles, but anyone may delete it mid-compile (a user, a namespace
    cleanup); the Volcano jobs still say. Read only when this job is about to compile: from the
    operator's index of them (`watched`), else listed (one list per job at 1000 jobs); a `fresh`
    pass lists what the index shows (a ghost), never an entry it shows none of.
    """
    mine = naming.vcjob_name(owner.name, "precompile", size)
    found = _precompiles(ident, owner.namespace, watched)
    if fresh and found:
        found = _precompiles(ident, owner.namespace, None)
    for job in found:
        md = job.get("metadata") or {}
        ours = md.get("name") == mine and reads.ours(job, owner)[0] is not None
        if _compiling(job) and not ours:  # an earlier job's of this name compiles too
            return "other", f"{owner.namespace}/{ownership.owner_name(md)}"
    return "none", ""


def _compiling(job: Json) -> bool:
    """A precompile Volcano job still compiles: neither ended nor going."""
    done = _state(job) in (Child.SUCCEEDED, Child.FAILED)
    return not done and not (job.get("metadata") or {}).get("deletionTimestamp")


def _precompiles(
    ident: cache.Identity, namespace: str, watched: Mapping[tuple[str, str], Iterable[Json]] | None
) -> list[Json]:
    """The precompile Volcano jobs of one cache entry: watched, or listed by label."""
    if watched is None:
        entry = f"{cache.LABEL_CACHE_ENTRY}={ident.record_name}"
        return k8s.list_vcjobs(namespace, f"{entry},{ownership.LABEL_STAGE}=precompile")
    return lookup(watched, (namespace, ident.record_name))


def _alive(namespace: str, name: str, uid: str, read: Reader) -> bool:
    """A lease holder is live while its job exists (same uid) and has not finished."""
    body = read.get(Kind.TRAINIUMJOB, namespace, name)
    if body is None or body["metadata"].get("uid") != uid:
        return False
    phase = (body.get("status") or {}).get("phase")
    return phase not in {p.value for p in TERMINAL}


def _state(job: Json) -> Child:
    return lifecycle.from_volcano(((job.get("status") or {}).get("state") or {}).get("phase"))
