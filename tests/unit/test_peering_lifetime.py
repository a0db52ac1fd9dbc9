"""The peering lifetime: how long a SIGKILLed active replica blocks its standby."""

from __future__ import annotations

from trainium_operator.cluster import peering


def test_lifetime_defaults_under_the_30s_hand_over() -> None:
    assert peering.lifetime({}) == peering.LIFETIME <= 25


def test_lifetime_from_env_has_a_floor() -> None:
    """kopf renews every lifetime - 5..10 s: below 15 s it would renew every second."""
    assert peering.lifetime({peering.LIFETIME_ENV: "40"}) == 40
    assert peering.lifetime({peering.LIFETIME_ENV: "3"}) == 15
    assert peering.lifetime({peering.LIFETIME_ENV: " "}) == peering.LIFETIME
