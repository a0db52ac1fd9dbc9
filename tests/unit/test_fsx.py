"""FSx DescribeFileSystems look-up: names on success, a condition reason and advice on failure."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError, NoCredentialsError
from botocore.stub import Stubber
from moto import mock_aws

from trainium_operator.cluster import fsx

FS_ID = "fs-0123456789abcdef0"
REGION = "us-west-2"


def _client() -> Any:
    # Explicit fake credentials: nothing is read from the environment, nothing leaves the process.
    return boto3.client(
        "fsx", region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )


@pytest.fixture
def stubbed() -> Iterator[tuple[Any, Stubber]]:
    client = _client()
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def _lustre(**overrides: Any) -> dict[str, Any]:
    fs = {
        "FileSystemId": FS_ID,
        "FileSystemType": "LUSTRE",
        "DNSName": f"{FS_ID}.fsx.{REGION}.amazonaws.com",
        "LustreConfiguration": {"MountName": "abcdefgh"},
    }
    fs.update(overrides)
    return fs


def test_success_returns_dns_and_mount_name(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    stubber.add_response(
        "describe_file_systems", {"FileSystems": [_lustre()]}, {"FileSystemIds": [FS_ID]}
    )
    assert fsx.describe(FS_ID, client) == fsx.FsxNames(
        dns_name=f"{FS_ID}.fsx.{REGION}.amazonaws.com", mount_name="abcdefgh"
    )


def test_not_found_error(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    stubber.add_client_error(
        "describe_file_systems",
        service_error_code="FileSystemNotFound",
        service_message="File system 'fs-0123456789abcdef0' does not exist.",
        http_status_code=400,
    )
    with pytest.raises(fsx.FsxLookupError) as err:
        fsx.describe(FS_ID, client)
    assert err.value.reason == "FileSystemNotFound"
    assert FS_ID in str(err.value)


@pytest.mark.parametrize("code", ["AccessDeniedException", "AccessDenied"])
def test_access_denied_says_what_to_grant(stubbed: tuple[Any, Stubber], code: str) -> None:
    client, stubber = stubbed
    stubber.add_client_error("describe_file_systems", service_error_code=code, http_status_code=403)
    with pytest.raises(fsx.FsxLookupError) as err:
        fsx.describe(FS_ID, client)
    assert err.value.reason == "FsxAccessDenied"
    message = str(err.value)
    assert FS_ID in message
    assert "fsx:DescribeFileSystems" in message  # the permission to grant
    assert "dnsName" in message and "mountName" in message  # or the way around it


def test_other_api_errors_are_lookup_failures(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    stubber.add_client_error(
        "describe_file_systems", service_error_code="InternalServerError", http_status_code=500
    )
    with pytest.raises(fsx.FsxLookupError) as err:
        fsx.describe(FS_ID, client)
    assert err.value.reason == "FsxLookupFailed"
    assert FS_ID in str(err.value)


@pytest.mark.parametrize("fs_type", ["WINDOWS", "ONTAP", "OPENZFS"])
def test_non_lustre_file_system(stubbed: tuple[Any, Stubber], fs_type: str) -> None:
    client, stubber = stubbed
    fs = _lustre(FileSystemType=fs_type)
    del fs["LustreConfiguration"]
    stubber.add_response("describe_file_systems", {"FileSystems": [fs]})
    with pytest.raises(fsx.FsxLookupError) as err:
        fsx.describe(FS_ID, client)
    assert err.value.reason == "FileSystemNotLustre"
    assert fs_type in str(err.value)


class _Unreachable:
    """A client whose calls fail before reaching AWS, as without credentials or network."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def describe_file_systems(self, **_: Any) -> Any:
        raise self.exc


@pytest.mark.parametrize(
    "exc",
    [NoCredentialsError(), EndpointConnectionError(endpoint_url="https://fsx.example")],
    ids=["no-credentials", "no-endpoint"],
)
def test_no_aws_access_is_actionable(exc: Exception) -> None:
    with pytest.raises(fsx.FsxLookupError) as err:
        fsx.describe(FS_ID, _Unreachable(exc))
    assert err.value.reason == "FsxLookupFailed"
    assert "dnsName and mountName" in str(err.value)


# --- moto: the same calls against an emulated FSx API -------------------------------------


@pytest.fixture
def moto_fsx(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    with mock_aws():
        yield _client()


def test_moto_unknown_file_system_is_not_found(moto_fsx: Any) -> None:
    # moto answers an empty list where AWS raises FileSystemNotFound: both map to one reason.
    with pytest.raises(fsx.FsxLookupError) as err:
        fsx.describe(FS_ID, moto_fsx)
    assert err.value.reason == "FileSystemNotFound"


def test_moto_windows_file_system_is_not_lustre(moto_fsx: Any) -> None:
    created = moto_fsx.create_file_system(
        FileSystemType="WINDOWS", StorageCapacity=32, SubnetIds=["subnet-0123456789abcdef0"]
    )
    fs_id = created["FileSystem"]["FileSystemId"]
    with pytest.raises(fsx.FsxLookupError) as err:
        fsx.describe(fs_id, moto_fsx)
    assert err.value.reason == "FileSystemNotLustre"


# --- no AWS region: the client itself cannot be made ---------------------------------------


def no_region(monkeypatch: pytest.MonkeyPatch, region: str | None = None) -> None:
    """An environment without an AWS region (none in env, config or instance metadata)."""
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    if region is not None:
        monkeypatch.setenv("AWS_DEFAULT_REGION", region)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.mark.parametrize("region", [None, ""], ids=["unset", "empty"])
def test_no_region_is_a_lookup_failure_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, region: str | None
) -> None:
    no_region(monkeypatch, region)
    with pytest.raises(fsx.FsxLookupError) as err:
        fsx.describe(FS_ID)
    assert err.value.reason == "FsxLookupFailed"
    message = str(err.value)
    assert FS_ID in message and "region" in message and "AWS_REGION" in message
    assert "\n" not in message
