"""What the compile cache means for one job: trust an entry, compile, or report a hit.

The lifecycle asks these questions at several points; they depend only on the observed cache
record, the precompile policy and the job's own precompile child.
"""

from __future__ import annotations

from trainium_operator.domain.model import Child, Condition, Observed, Phase

#: Phases a job is in before its own precompile runs (None: no status yet).
_BEFORE_COMPILE = frozenset({None, "", Phase.PENDING.value, Phase.WAITING_FOR_CACHE.value})


def compile_unreported(obs: Observed) -> bool:
    """The job's own precompile finished before any status said it ran (the pass after its
    creation came late, or its write was refused): Precompiling is written before Training, so
    status.history, its Events and its cost show the compile."""
    if obs.precompile is not Child.SUCCEEDED or obs.previous_phase not in _BEFORE_COMPILE:
        return False
    return not any(c.type == "Precompiled" and c.status == "True" for c in obs.previous_conditions)


def needs_precompile(obs: Observed) -> bool:
    """Compile unless the policy says never, or a trusted Ready entry already holds the graphs."""
    if obs.policy == "Never" or obs.precompile is Child.SUCCEEDED:
        return False
    if obs.precompile is not Child.ABSENT:
        return True
    return obs.policy == "Always" or not trusted(obs)


def trusted(obs: Observed) -> bool:
    """The entry is Ready and no live job is compiling it again (precompile.policy Always)."""
    return obs.cache_recorded and obs.cache_holder != "other"


def cache_hit(obs: Observed) -> bool | None:
    """Hit when graphs came from the cache, miss when we compiled, None when not applicable."""
    if obs.policy == "Never":
        return None
    if obs.precompile is not Child.ABSENT:
        return False
    return obs.policy == "IfNotCached" and trusted(obs)


def precompiled_condition(obs: Observed, hit: bool | None) -> Condition:
    """The Precompiled condition once the graphs are there: skipped, a cache hit, or compiled."""
    if obs.policy == "Never":
        return Condition("Precompiled", "False", "Skipped", "precompile.policy is Never")
    if hit:
        return Condition("Precompiled", "True", "CacheHit", "graphs found in the compile cache")
    return Condition("Precompiled", "True", "Compiled", "precompile job completed")
