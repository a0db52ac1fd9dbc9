"""Cost accounting: a simulated run against a hand calculation, unknown prices, overrides, drift."""

from __future__ import annotations

import datetime
import json
import re
from decimal import Decimal
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

from trainium_operator.api import crd
from trainium_operator.api.instances import INSTANCE_TYPES
from trainium_operator.domain import cost
from trainium_operator.domain.lifecycle import Phase
from trainium_operator.runtime import metrics

UTC = datetime.timezone.utc
T0 = datetime.datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
CHART = crd.crd_path().parents[1] / "charts" / "trainium-operator"


def at(hours: float) -> datetime.datetime:
    """T0 plus some hours."""
    return T0 + datetime.timedelta(hours=hours)


def rfc3339(hours: float) -> str:
    """T0 plus some hours, as Kubernetes writes timestamps."""
    return at(hours).strftime("%Y-%m-%dT%H:%M:%SZ")


PRICES = cost.DEFAULT_PRICES


# --- the issue's scenario: a simulated run against a hand calculation ------------------------


def simulated_run(instance_type: str = "trn1.32xlarge", nodes: int = 2, **kw: Any) -> cost.Cost:
    """Pending 0.1 h, Precompiling 0.5 h, Training 3 h, then Succeeded (open, now far later).

    Inside Training: the gang pends for 0.25 h first (nodes launching), and a pod failure at
    1.0 h into training loses 0.25 h until the re-created gang runs (it re-pends for 0.1 h of
    that, which counts as restart loss, not waiting). Phase times are RFC 3339 strings, as on
    status; the restart interval uses datetimes.
    """
    phases = [
        ("Pending", rfc3339(0), rfc3339(0.1)),
        ("Precompiling", rfc3339(0.1), rfc3339(0.6)),
        ("Training", rfc3339(0.6), rfc3339(3.6)),
        ("Succeeded", rfc3339(3.6), None),
    ]
    return cost.compute(
        instance_type, nodes, phases,
        now=at(50), prices=kw.get("prices", PRICES),
        restarts=[(at(1.6), at(1.85))],
        gang_pending=[(rfc3339(0.6), rfc3339(0.85)), (rfc3339(1.75), rfc3339(1.85))],
    )  # fmt: skip


def test_the_cost_of_a_simulated_run_matches_a_hand_calculation() -> None:
    fragment = cost.status_fragment(simulated_run())
    nodes, price = 2, 21.50  # 2 x trn1.32xlarge at the issue's $21.50/h
    waiting = nodes * 0.25  # the first training gang pending
    compiling = nodes * 0.5
    restarts = nodes * 0.25
    training = nodes * (3 - 0.25 - 0.25)  # the Training phase minus waiting and restart loss
    assert fragment["instanceHours"] == {
        "waiting": waiting, "compiling": compiling, "training": training, "restarts": restarts,
        "total": waiting + compiling + training + restarts,
    }  # fmt: skip
    assert fragment["estimated"] == {
        "waiting": waiting * price,  # 10.75
        "compiling": compiling * price,  # 21.50
        "training": training * price,  # 107.50
        "restarts": restarts * price,  # 10.75
        "total": 7.0 * price,  # 150.50
    }
    assert fragment["display"] == "$150.50"
    assert fragment["pricePerHour"] == 21.5
    assert fragment["currency"] == "USD"
    assert fragment["unknown"] is False


def test_the_status_fragment_is_valid_against_the_crd() -> None:
    obj = {
        "apiVersion": "trainium.dev/v1alpha1", "kind": "TrainiumJob",
        "spec": {"image": "i", "instanceType": "trn1.32xlarge", "storage": {"claimName": "c"}},
        "status": {"cost": cost.status_fragment(simulated_run())},
    }  # fmt: skip
    assert crd.schema_errors(crd.apply_defaults(obj, crd.version_schema())) == []
    unknown = dict(obj, status={"cost": cost.status_fragment(simulated_run("trn2.48xlarge"))})
    assert crd.schema_errors(crd.apply_defaults(unknown, crd.version_schema())) == []


def test_the_status_fragment_has_every_field_the_crd_declares() -> None:
    schema = crd.version_schema()["properties"]["status"]["properties"]["cost"]["properties"]
    fragment = cost.status_fragment(simulated_run())
    # projected: only while training; by size: only for an elastic job
    assert set(fragment) | {"projectedTotal", "instanceHoursBySize"} == set(schema)
    assert set(cost.with_projection(fragment, 3600, 2)) | {"instanceHoursBySize"} == set(schema)
    for key in ("instanceHours", "estimated"):
        assert set(fragment[key]) == set(schema[key]["properties"]) == {*cost.BUCKETS, "total"}


def test_the_cost_column_shows_the_display_field() -> None:
    columns = crd.load_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    column = next(c for c in columns if c["name"] == "Cost")
    assert (column["type"], column["jsonPath"]) == ("string", ".status.cost.display")


# --- what accrues and what does not ----------------------------------------------------------


def test_an_open_phase_runs_until_the_injected_now() -> None:
    run = cost.compute("trn1.2xlarge", 4, [("Training", T0, None)], now=at(1.5), prices=PRICES)
    assert run.instance_hours["training"] == Decimal("6")  # 4 nodes x 1.5 h
    assert cost.display(run) == "$8.04"  # 6 x 1.34


def test_phases_without_a_gang_cost_nothing() -> None:
    phases = [
        ("Pending", at(0), at(2)),
        ("WaitingForCache", at(2), at(7)),
        ("Training", at(7), at(8)),
        ("Suspended", at(8), at(20)),  # the gang is removed, its nodes released
        ("Training", at(20), at(21)),
        ("Failed", at(21), None),
    ]
    run = cost.compute("trn1.32xlarge", 2, phases, now=at(100), prices=PRICES)
    assert run.instance_hours == {
        "waiting": 0, "compiling": 0, "training": Decimal(2 * 2), "restarts": 0
    }  # fmt: skip
    assert cost.status_fragment(run)["estimated"]["total"] == 2 * 2 * 21.50


def test_without_gang_pending_intervals_waiting_is_zero() -> None:
    run = cost.compute("trn1.32xlarge", 1, [("Precompiling", T0, at(1))], now=at(1), prices=PRICES)
    assert run.instance_hours["waiting"] == 0
    assert run.instance_hours["compiling"] == 1


def test_overlapping_restarts_count_once() -> None:
    run = cost.compute(
        "trn1.32xlarge", 1, [("Training", T0, at(4))], now=at(4), prices=PRICES,
        restarts=[(at(1), at(2)), (at(1.5), at(2.5)), (at(1.5), at(1.6))],
    )  # fmt: skip
    assert run.instance_hours["restarts"] == Decimal("1.5")
    assert run.instance_hours["training"] == Decimal("2.5")


def test_intervals_outside_gang_phases_are_ignored() -> None:
    run = cost.compute(
        "trn1.32xlarge", 1, [("Pending", T0, at(1)), ("Training", at(1), at(2))],
        now=at(2), prices=PRICES, gang_pending=[(T0, at(1.5))],
    )  # fmt: skip
    assert run.instance_hours == {"waiting": Decimal("0.5"), "compiling": 0, "training": Decimal(
        "0.5"), "restarts": 0}  # fmt: skip


def test_a_large_total_has_thousands_separators() -> None:
    run = cost.compute("trn1.32xlarge", 64, [("Training", T0, at(24))], now=at(24), prices=PRICES)
    assert cost.display(run) == "$33,024.00"  # 64 x 24 x 21.50


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1, [("Running", T0, at(1))]), "unknown phase 'Running'"),
        ((1, [("Training", at(1), T0)]), "phase Training ends before it starts"),
        ((1, [("Training", "yesterday", None)]), "not an RFC 3339 timestamp: 'yesterday'"),
        ((1, [("Training", datetime.datetime(2026, 1, 1), None)]), "without a timezone"),
        ((0, [("Training", T0, at(1))]), "nodes must be at least 1, got 0"),
    ],
)
def test_bad_history_is_a_clear_error(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        cost.compute("trn1.32xlarge", *args, now=at(2), prices=PRICES)


def test_every_lifecycle_phase_is_classified() -> None:
    known = set(cost.GANG_PHASES) | cost.IDLE_PHASES
    assert {p.value for p in Phase} <= known


# --- prices: defaults, unknown, overrides ----------------------------------------------------


def test_default_prices_are_the_issues_and_trn2_has_none() -> None:
    issue = {"trn1.2xlarge": "1.34", "trn1.32xlarge": "21.50", "trn1n.32xlarge": "24.78"}
    expected = {name: Decimal(usd) for name, usd in issue.items()}
    assert expected == cost.DEFAULT_PRICES


def test_trn2_cost_is_unknown_until_a_price_is_set() -> None:
    fragment = cost.status_fragment(simulated_run("trn2.48xlarge"))
    assert fragment["estimated"] is None
    assert fragment["pricePerHour"] is None
    assert fragment["unknown"] is True
    assert fragment["display"] == "unknown"
    assert fragment["instanceHours"]["total"] == 7.0  # the hours are known all the same
    prices, error = cost.effective_prices('{"trn2.48xlarge": 44.70}')
    assert error is None
    priced = cost.status_fragment(simulated_run("trn2.48xlarge", prices=prices))
    assert priced["display"] == "$312.90"  # 7.0 x 44.70
    assert priced["unknown"] is False


@pytest.mark.parametrize(
    "text",
    [
        '{"trn2.48xlarge": 44.7, "trn1.32xlarge": 20}',
        '{"trn2.48xlarge": "44.7", "trn1.32xlarge": 20}',  # helm --set gives strings
        "trn2.48xlarge=44.7,trn1.32xlarge=20",
        " trn2.48xlarge = 44.7 , trn1.32xlarge=20, ",
    ],
)
def test_overrides_in_either_form(text: str) -> None:
    prices, error = cost.effective_prices(text)
    assert error is None
    assert prices == {
        "trn1.2xlarge": Decimal("1.34"),
        "trn1.32xlarge": Decimal("20"),
        "trn1n.32xlarge": Decimal("24.78"),
        "trn2.48xlarge": Decimal("44.7"),
    }


@pytest.mark.parametrize("text", [None, "", "  ", "{}"])
def test_no_overrides_means_the_defaults(text: str | None) -> None:
    assert cost.effective_prices(text) == (cost.DEFAULT_PRICES, None)


BAD = [
    ('{"trn3.1xlarge": 5}', "unknown instance type 'trn3.1xlarge' (supported: trn1.2xlarge,"),
    ('{"trn2.48xlarge": -1}', "price of trn2.48xlarge must be a non-negative number"),
    ('{"trn2.48xlarge": true}', "price of trn2.48xlarge must be a non-negative number"),
    ('{"trn2.48xlarge": null}', "price of trn2.48xlarge must be a non-negative number"),
    ('{"trn2.48xlarge": NaN}', "price of trn2.48xlarge must be a non-negative number"),
    ('{"trn2.48xlarge": Infinity}', "price of trn2.48xlarge must be a non-negative number"),
    ("trn2.48xlarge=cheap", "of trn2.48xlarge must be a non-negative number of USD per hour, got"),
    ("trn2.48xlarge=44.7,trn1.32xlarge", "'trn1.32xlarge' is not instanceType=price"),
    ('{"trn2.48xlarge": 44.7', "not valid JSON"),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[t for t, _ in BAD])
def test_a_bad_override_is_one_line_and_keeps_the_defaults(text: str, message: str) -> None:
    prices, error = cost.effective_prices(text)
    assert prices == cost.DEFAULT_PRICES
    assert error is not None
    assert message in error
    assert error.startswith("TRAINIUM_PRICES: ")
    assert error.endswith("; using the default prices")
    assert "\n" not in error
    with pytest.raises(cost.PriceError):
        cost.parse_prices(text)


def test_a_bad_override_leaves_the_default_table_untouched() -> None:
    before = dict(cost.DEFAULT_PRICES)
    prices, _ = cost.effective_prices("trn1.32xlarge=1,trn3=2")
    prices["trn1.32xlarge"] = Decimal(0)
    assert before == cost.DEFAULT_PRICES


# --- drift: the price table, the CRD enum, the chart's values and schema ---------------------


def test_price_table_keys_are_the_crds_instance_type_enum() -> None:
    enum = crd.version_schema()["properties"]["spec"]["properties"]["instanceType"]["enum"]
    assert list(INSTANCE_TYPES) == enum
    assert set(cost.DEFAULT_PRICES) <= set(enum)
    assert [n for n, t in INSTANCE_TYPES.items() if t.usd_per_hour is None] == [
        "trn2.48xlarge",
        "trn2u.48xlarge",
        "trn3.48xlarge",
    ]


def test_chart_schema_price_keys_are_the_crds_instance_type_enum() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    assert schema["properties"]["prices"]["propertyNames"]["enum"] == list(INSTANCE_TYPES)


def test_chart_values_document_the_default_prices() -> None:
    text = (CHART / "values.yaml").read_text(encoding="utf-8")
    assert yaml.safe_load(text)["prices"] == {}
    comment = text[: text.index("\nprices:")].rsplit("# --", 1)[1]
    documented = re.findall(r"(trn[0-9a-z]*\.[0-9]*xlarge) ([0-9.]+)", comment)
    assert {n: Decimal(p) for n, p in documented} == cost.DEFAULT_PRICES
    assert cost.PRICES_ENV in comment


# --- metrics ---------------------------------------------------------------------------------


def test_cost_increments_per_bucket() -> None:
    assert metrics.cost_increments(simulated_run()) == [
        ("waiting", "trn1.32xlarge", 0.5, 10.75),
        ("compiling", "trn1.32xlarge", 1.0, 21.5),
        ("training", "trn1.32xlarge", 5.0, 107.5),
        ("restarts", "trn1.32xlarge", 0.5, 10.75),
    ]
    unknown = metrics.cost_increments(simulated_run("trn2.48xlarge"))
    assert [(b, usd) for b, _, _, usd in unknown] == [(b, None) for b in cost.BUCKETS]


def _samples(itype: str) -> dict[str, float]:
    """Current counter values of one instance type, as {"<bucket> hours|usd": value}."""
    out = {}
    for b in cost.BUCKETS:
        for unit, name, scale in (
            ("hours", "instance_seconds", 3600),
            ("usd", "estimated_cost_usd", 1),
        ):
            labels = {"bucket": b, "instance_type": itype}
            value = REGISTRY.get_sample_value(f"trainium_operator_{name}_total", labels)
            out[f"{b} {unit}"] = (value or 0.0) / scale
    return out


def test_count_cost_moves_the_counters() -> None:
    before = _samples("trn1.32xlarge")
    metrics.count_cost(simulated_run())
    after = _samples("trn1.32xlarge")
    assert {k: after[k] - before[k] for k in after} == pytest.approx(
        {"waiting hours": 0.5, "waiting usd": 10.75, "compiling hours": 1.0, "compiling usd": 21.5,
         "training hours": 5.0, "training usd": 107.5, "restarts hours": 0.5, "restarts usd": 10.75}
    )  # fmt: skip


def test_an_unknown_price_adds_hours_but_no_usd_series() -> None:
    # No other test counts trn1n.32xlarge: with no price table its USD series must not exist,
    # not even at 0 (a $0 series would read as "free").
    metrics.count_cost(simulated_run("trn1n.32xlarge", prices={}))
    labels = {"bucket": "training", "instance_type": "trn1n.32xlarge"}
    get = REGISTRY.get_sample_value
    assert get("trainium_operator_instance_seconds_total", labels) == pytest.approx(5.0 * 3600)
    assert get("trainium_operator_estimated_cost_usd_total", labels) is None


def test_the_projection_adds_the_eta_on_every_node_to_the_estimate_so_far() -> None:
    fragment = {"pricePerHour": 21.5, "estimated": {"total": 10.0}, "display": "$10.00"}
    got = cost.with_projection(fragment, 5400, 2)  # 1.5 h x 2 nodes x $21.50 = $64.50
    assert got["projectedTotal"] == 74.5 and got["display"] == "$10.00 (~$74.50)"


@pytest.mark.parametrize("eta", [None, "1h", 1.5])
def test_no_eta_no_projection(eta: object) -> None:
    fragment = {"pricePerHour": 21.5, "estimated": {"total": 10.0}, "display": "$10.00"}
    assert cost.with_projection(fragment, eta, 2) is fragment


def test_no_price_no_projection() -> None:
    fragment = {"pricePerHour": None, "estimated": None, "display": "unknown"}
    assert cost.with_projection(fragment, 600, 2) is fragment
