"""PID 1 of one container the running kubelet starts (podrun.py): its mounts, then its command.

Run as `ip netns exec NETNS unshare --mount --pid --uts --fork --mount-proc --propagation private
-- python podinit.py CONFIG`: in the pod's network namespace, a mount, PID and UTS namespace of its
own. It sets the hostname, binds the pod's volumes, hosts file and termination-message file at
the paths the pod spec names, starts the command with the container's env and cwd (output to the
container's log), forwards SIGTERM/SIGINT to it (as tini does), reaps orphans and exits with its
code (128 + N when a signal ended it). When it exits the kernel kills whatever is left in the PID
namespace, so a container never outlives its PID 1. Stdlib only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def _point(target: Path, is_file: bool) -> None:
    """A mount point at target (an empty directory or file, made on the host's tree if absent)."""
    if target.exists():
        return
    if is_file:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()
    else:
        target.mkdir(parents=True, exist_ok=True)


def bind(source: str, target: str, read_only: bool = False) -> None:
    """source at target in this mount namespace (tmpfs: a fresh one, as medium: Memory)."""
    if source == "tmpfs":
        _point(Path(target), False)
        _mount("-t", "tmpfs", "-o", "mode=1777", "tmpfs", target)
        return
    is_file = Path(source).is_file()
    _point(Path(target), is_file)
    _mount("--bind", source, target)
    if read_only:
        _mount("-o", "remount,bind,ro", target)


#: The device nodes a container runtime gives every container (bound from the host's).
STANDARD_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


def make_dev(stage: Path, devices: list[str]) -> None:
    """A /dev of the container's own (a tmpfs, as runtimes make it): the standard nodes, a 64 MiB
    /dev/shm, and the device plugin's devices (each a node that opens: the host's /dev/null)."""
    stage.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", "mode=755", "tmpfs", str(stage))
    for name in [*STANDARD_DEVICES, *devices]:
        node = stage / name
        node.parent.mkdir(parents=True, exist_ok=True)
        node.touch()
        _mount("--bind", f"/dev/{name}" if name in STANDARD_DEVICES else "/dev/null", str(node))
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):  # fmt: skip
        (stage / name).symlink_to(target)
    (stage / "shm").mkdir()
    _mount("-t", "tmpfs", "-o", "mode=1777,size=64m", "tmpfs", str(stage / "shm"))
    _mount("--move", str(stage), "/dev")


def main(config_path: str) -> int:
    """Set the container up from its config, run its command, return its exit code."""
    config: dict[str, Any] = json.loads(Path(config_path).read_text())
    socket.sethostname(config["hostname"])
    make_dev(Path(config["dev"]), config["devices"])
    for mount in config["mounts"]:
        bind(mount["source"], mount["target"], mount.get("read_only", False))
    with open(config["log"], "ab", buffering=0) as log:
        try:
            child = subprocess.Popen(
                config["argv"], env=config["env"], cwd=config["cwd"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except OSError as exc:  # the runtime's "executable file not found": exit 127 / 126
            log.write(f"exec {config['argv'][0]}: {exc}\n".encode())
            return 127 if isinstance(exc, FileNotFoundError) else 126
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda s, _f: child.send_signal(s))
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 1
        except InterruptedError:
            continue
        if pid == child.pid:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
