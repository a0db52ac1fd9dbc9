"""Look up an FSx for Lustre file system's DNS and mount names with boto3 (DescribeFileSystems)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botocore.exceptions import ClientError


@dataclass(frozen=True)
class FsxNames:
    """What the FSx CSI driver needs to mount a file system."""

    dns_name: str
    mount_name: str


#: Looks a file system up by id (describe, or a test's fake).
FsxLookup = Callable[[str], FsxNames]


class FsxLookupError(Exception):
    """The lookup failed; `reason` is a condition reason, the message says what to do."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def describe(file_system_id: str, fsx_client: Any | None = None) -> FsxNames:
    """DNS and mount names of one file system, or FsxLookupError with an actionable message."""
    import boto3  # only here: boto3 costs the operator ~7 MB resident, most jobs never need it
    from botocore.exceptions import BotoCoreError, ClientError, NoRegionError

    try:
        # The client is made inside the try: without a region boto3 refuses to make one.
        fsx = fsx_client or boto3.client("fsx")
        resp = fsx.describe_file_systems(FileSystemIds=[file_system_id])
    except ClientError as exc:
        raise _client_error(file_system_id, exc) from None
    except NoRegionError:
        raise _unreachable(file_system_id, "no AWS region is configured (set AWS_REGION)") from None
    except (BotoCoreError, ValueError) as exc:  # no credentials, endpoint unreachable, bad region
        raise _unreachable(file_system_id, str(exc)) from None
    systems = resp.get("FileSystems", [])
    if not systems:
        raise FsxLookupError("FileSystemNotFound", f"FSx file system {file_system_id} not found")
    fs = systems[0]
    mount = fs.get("LustreConfiguration", {}).get("MountName")
    kind = fs.get("FileSystemType")
    if kind != "LUSTRE":
        msg = f"FSx file system {file_system_id} is {kind}, not Lustre"
        raise FsxLookupError("FileSystemNotLustre", msg)
    if not mount:
        msg = f"FSx file system {file_system_id} has no Lustre mount name; set fsx.mountName"
        raise FsxLookupError("FsxLookupFailed", msg)
    return FsxNames(dns_name=fs["DNSName"], mount_name=mount)


def _unreachable(file_system_id: str, why: str) -> FsxLookupError:
    """AWS could not be asked: say why (one line) and the two ways around it."""
    why = " ".join(why.split())
    return FsxLookupError(
        "FsxLookupFailed",
        f"cannot describe FSx file system {file_system_id}: {why}; set "
        "spec.storage.fsx.dnsName and mountName, or give the operator AWS access and a region "
        "(AWS_REGION; the chart's operator.awsRegion)",
    )


def _client_error(file_system_id: str, exc: ClientError) -> FsxLookupError:
    code = exc.response.get("Error", {}).get("Code", "")
    if code == "FileSystemNotFound":
        return FsxLookupError("FileSystemNotFound", f"FSx file system {file_system_id} not found")
    if code in ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation"):
        return FsxLookupError(
            "FsxAccessDenied",
            f"not allowed to describe FSx file system {file_system_id}: grant "
            "fsx:DescribeFileSystems to the operator's service account (IRSA / Pod Identity) "
            "or set spec.storage.fsx.dnsName and mountName",
        )
    return FsxLookupError("FsxLookupFailed", f"describing {file_system_id} failed: {exc}")
