"""Pure cost accounting of a TrainiumJob: instance-hours and estimated USD per lifecycle bucket.

What counts (the assumptions, stated once):
- A job holds instances only while one of its Volcano gangs exists: the Precompiling and
  Training phases. Pending, WaitingForCache, Suspended (the gang is removed, its nodes released),
  Succeeded and Failed hold no gang, so they accrue no instance time at all.
- Inside a gang phase the time is split into buckets, each instant counted once:
  `restarts` (lost to a restart: from a gang failure to the gang running again) first, then
  `waiting` (the gang exists but is not running yet: nodes launching, images pulling; the
  status history's GangPending spans), and the rest goes to
  `compiling` (Precompiling) or `training` (Training).
- instance-hours = nodes x wall-clock hours: AWS bills an instance while it is up, and the
  gang's nodes are the job's for as long as the gang exists. Both stages use spec.nodes nodes.
- Cost = instance-hours x the price of the instance type, None when the price is unknown.
  Totals are computed before rounding, so they may differ from the rounded buckets' sum by a cent.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from trainium_operator.api.instances import INSTANCE_TYPES

#: Env var with price overrides (the chart's `prices` value as JSON); read by the operator.
PRICES_ENV = "TRAINIUM_PRICES"
CURRENCY = "USD"
BUCKETS = ("waiting", "compiling", "training", "restarts")
#: Phases whose gang holds nodes, and the bucket their remaining time goes to.
GANG_PHASES = {"Precompiling": "compiling", "Training": "training"}
#: Phases in which the job has no gang, so no instances.
IDLE_PHASES = frozenset({"Pending", "WaitingForCache", "Suspended", "Succeeded", "Failed"})
#: Default prices: the instance table's, minus the types without one (trn2.48xlarge).
DEFAULT_PRICES: dict[str, Decimal] = {
    name: Decimal(str(t.usd_per_hour))
    for name, t in INSTANCE_TYPES.items()
    if t.usd_per_hour is not None
}
_CENT = Decimal("0.01")
_MILLI = Decimal("0.001")

Time = datetime.datetime | str


class PriceError(ValueError):
    """A price override that cannot be used; the message is one line naming the key."""


# --- prices ----------------------------------------------------------------------------------


def parse_prices(text: str) -> dict[str, Decimal]:
    """Overrides from JSON (`{"trn2.48xlarge": 44.7}`) or `type=price,type=price`; {} if empty."""
    text = text.strip()
    if not text:
        return {}
    if text.startswith("{"):
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            where = f"{e.msg} at column {e.colno}"
            raise PriceError(f"{PRICES_ENV}: not valid JSON ({where})") from None
        items: Iterable[tuple[str, Any]] = raw.items()
    else:
        items = [_pair(part) for part in text.split(",") if part.strip()]
    return {name: _price(name, value) for name, value in items}


def _pair(part: str) -> tuple[str, str]:
    name, sep, value = part.partition("=")
    if not sep:
        raise PriceError(f"{PRICES_ENV}: {part.strip()!r} is not instanceType=price")
    return name.strip(), value.strip()


def _price(name: str, value: Any) -> Decimal:
    """One validated price: a known instance type and a finite, non-negative number."""
    if name not in INSTANCE_TYPES:
        known = ", ".join(INSTANCE_TYPES)
        raise PriceError(f"{PRICES_ENV}: unknown instance type {name!r} (supported: {known})")
    bad = PriceError(
        f"{PRICES_ENV}: price of {name} must be a non-negative number of USD per hour, "
        f"got {value!r}"
    )
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise bad
    try:
        price = Decimal(str(value))
    except ArithmeticError:
        raise bad from None
    if not price.is_finite() or price < 0:
        raise bad
    return price


def effective_prices(text: str | None) -> tuple[dict[str, Decimal], str | None]:
    """The defaults with the overrides applied, or the defaults and the error line when bad."""
    try:
        overrides = parse_prices(text or "")
    except PriceError as e:
        return dict(DEFAULT_PRICES), f"{e}; using the default prices"
    return {**DEFAULT_PRICES, **overrides}, None


# --- time intervals --------------------------------------------------------------------------


def to_datetime(value: Time) -> datetime.datetime:
    """A timezone-aware datetime from a datetime or an RFC 3339 string."""
    if isinstance(value, str):
        text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
        try:
            value = datetime.datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"not an RFC 3339 timestamp: {value!r}") from None
    if value.tzinfo is None:
        raise ValueError(f"timestamp without a timezone: {value.isoformat()}")
    return value


Span = tuple[float, float]  # POSIX seconds, start <= end


def _span(start: Time, end: Time | None, now: datetime.datetime, what: str) -> Span:
    """An interval in seconds; an open end is now (never before the start: clock skew)."""
    a = to_datetime(start).timestamp()
    if end is None:
        return a, max(a, now.timestamp())
    b = to_datetime(end).timestamp()
    if b < a:
        raise ValueError(f"{what} ends before it starts ({start} > {end})")
    return a, b


def _union(spans: Iterable[Span]) -> list[Span]:
    """Sorted, non-overlapping spans covering the same instants."""
    out: list[Span] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _overlap(span: Span, union: Sequence[Span]) -> float:
    """Seconds of span covered by a union of spans."""
    return sum(max(0.0, min(span[1], b) - max(span[0], a)) for a, b in union)


# --- the computation -------------------------------------------------------------------------


@dataclass(frozen=True)
class Cost:
    """Instance-hours per bucket of one job, and its price per instance-hour (None: unknown)."""

    instance_type: str
    nodes: int
    price_per_hour: Decimal | None
    instance_hours: Mapping[str, Decimal]
    #: Instance-hours by gang size (nodes -> hours) of an elastic job; empty otherwise.
    by_size: Mapping[int, Decimal] = field(default_factory=dict)

    @property
    def total_hours(self) -> Decimal:
        """Instance-hours of all buckets."""
        return sum((self.instance_hours[b] for b in BUCKETS), Decimal(0))

    def usd(self, bucket: str) -> Decimal | None:
        """Estimated USD of a bucket (or "total"), unrounded; None when the price is unknown."""
        if self.price_per_hour is None:
            return None
        hours = self.total_hours if bucket == "total" else self.instance_hours[bucket]
        return hours * self.price_per_hour


PhaseInterval = tuple[str, Time, Time | None]
Interval = tuple[Time, Time | None]


def compute(
    instance_type: str,
    nodes: int,
    phases: Sequence[PhaseInterval],
    *,
    now: datetime.datetime,
    prices: Mapping[str, Decimal],
    restarts: Sequence[Interval] = (),
    gang_pending: Sequence[Interval] = (),
    sizes: Sequence[tuple[Time, int]] = (),
) -> Cost:
    """The job's cost from its phase history (end None: still in it at `now`).

    sizes: (since, nodes) of an elastic job's gang, oldest first; each instant counts the
    nodes of the size it falls in (the first size also covers what came before it).
    """
    if nodes < 1:
        raise ValueError(f"nodes must be at least 1, got {nodes}")
    lost = _union(_span(a, b, now, "restart interval") for a, b in restarts)
    held = _union([*lost, *(_span(a, b, now, "gang-pending interval") for a, b in gang_pending)])
    windows = _windows(sizes) or [(float("-inf"), float("inf"), nodes)]
    hours = {b: Decimal(0) for b in BUCKETS}
    by_size: dict[int, Decimal] = {}
    for low, high, size in windows:
        seconds = _bucket_seconds(phases, lost, held, now, (low, high))
        for bucket, secs in seconds.items():
            part = Decimal(repr(secs)) * size / 3600
            hours[bucket] += part
            if sizes:
                by_size[size] = by_size.get(size, Decimal(0)) + part
    return Cost(instance_type, nodes, prices.get(instance_type), hours, by_size)


def _windows(sizes: Sequence[tuple[Time, int]]) -> list[tuple[float, float, int]]:
    """(start, end, nodes) of each size; the first reaches back, the last forward, for ever."""
    starts = [to_datetime(since).timestamp() for since, _ in sizes]
    out = []
    for i, (_, size) in enumerate(sizes):
        low = float("-inf") if i == 0 else starts[i]
        high = starts[i + 1] if i + 1 < len(sizes) else float("inf")
        out.append((low, max(low, high), size))
    return out


def _bucket_seconds(
    phases: Sequence[PhaseInterval],
    lost: Sequence[Span],
    held: Sequence[Span],
    now: datetime.datetime,
    window: Span,
) -> dict[str, float]:
    """Seconds per bucket of the gang phases, inside one window of time."""
    seconds = dict.fromkeys(BUCKETS, 0.0)
    for phase, start, end in phases:
        if phase in IDLE_PHASES:
            continue
        if phase not in GANG_PHASES:
            raise ValueError(f"unknown phase {phase!r} in the phase history")
        a, b = _span(start, end, now, f"phase {phase}")
        span = (max(a, window[0]), min(b, window[1]))
        if span[1] <= span[0]:
            continue
        in_restarts, not_running = _overlap(span, lost), _overlap(span, held)
        seconds["restarts"] += in_restarts
        seconds["waiting"] += not_running - in_restarts
        seconds[GANG_PHASES[phase]] += span[1] - span[0] - not_running
    return seconds


# --- status ----------------------------------------------------------------------------------


def _number(value: Decimal, step: Decimal) -> float:
    """A rounded JSON number (the CRD's `type: number`)."""
    return float(value.quantize(step, rounding=ROUND_HALF_UP))


def display(cost: Cost) -> str:
    """The printer column's text: "$150.50", or "unknown" without a price."""
    total = cost.usd("total")
    if total is None:
        return "unknown"
    return f"${total.quantize(_CENT, rounding=ROUND_HALF_UP):,}"


def status_fragment(cost: Cost) -> dict[str, Any]:
    """status.cost as the CRD declares it: instance-hours, USD estimate, printer-column text."""
    keys = (*BUCKETS, "total")
    hours = {b: _number(cost.total_hours if b == "total" else cost.instance_hours[b], _MILLI)
             for b in keys}  # fmt: skip
    estimated = None
    if cost.price_per_hour is not None:
        estimated = {b: _number(cost.usd(b) or Decimal(0), _CENT) for b in keys}
    price = None if cost.price_per_hour is None else float(cost.price_per_hour)
    out = {
        "currency": CURRENCY,
        "pricePerHour": price,
        "instanceHours": hours,
        "estimated": estimated,
        "unknown": estimated is None,
        "display": display(cost),
    }
    if cost.by_size:  # an elastic job: node-hours of each gang size
        out["instanceHoursBySize"] = {
            str(n): _number(h, _MILLI) for n, h in sorted(cost.by_size.items(), reverse=True)
        }
    return out


def with_projection(fragment: dict[str, Any], eta_seconds: Any, nodes: int) -> dict[str, Any]:
    """status.cost plus the projected total at completion: so far, plus the ETA on every node.

    Assumes the gang runs to the end at the recent step rate, without restarts; without a price
    or an ETA the fragment stays as it is.
    """
    price, estimated = fragment.get("pricePerHour"), fragment.get("estimated")
    if not isinstance(eta_seconds, int) or price is None or not estimated:
        return fragment
    rest = Decimal(eta_seconds) / Decimal(3600) * nodes * Decimal(str(price))
    total = (Decimal(str(estimated["total"])) + rest).quantize(_CENT, rounding=ROUND_HALF_UP)
    return {
        **fragment,
        "projectedTotal": float(total),
        "display": f"{fragment['display']} (~${total:,})",
    }
