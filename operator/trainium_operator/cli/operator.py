"""`trainium operator`: kopf's run options we support, by our names, then `kopf run`."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from trainium_operator.cli.usage import Parser

OPERATOR_DESCRIPTION = """\
Run the operator against the current kubeconfig (or the in-cluster service account): it watches
TrainiumJobs and drives their storage, compile cache and Volcano jobs (kopf underneath).
Run one process with --standalone, or several with --leader-elect=NAME: they elect one leader
through the Lease NAME in $POD_NAMESPACE; only the leader writes, the others stand by.\
"""
OPERATOR_EXAMPLES = """\
examples:
  trainium operator --standalone --all-namespaces
  trainium operator --leader-elect=trainium -n team-a -n team-b --liveness=http://0.0.0.0:8080/healthz\
"""


def operator_parser() -> argparse.ArgumentParser:
    """`trainium operator`: kopf's run options we support, by our names (no module paths)."""
    p = Parser(
        prog="trainium operator",
        allow_abbrev=False,  # --standalon must not pass for --standalone
        description=OPERATOR_DESCRIPTION,
        epilog=OPERATOR_EXAMPLES,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    who = p.add_mutually_exclusive_group()
    who.add_argument("--standalone", action="store_true", help="the only operator: no election")
    who.add_argument(
        "--leader-elect", "-P", "--peering", dest="lease", metavar="NAME",
        help="elect one acting replica through the Lease NAME (--peering: its old name)",
    )  # fmt: skip
    where = p.add_mutually_exclusive_group()
    where.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    where.add_argument(
        "-n", "--namespace", action="append", default=[], help="watch this namespace (repeatable)"
    )
    p.add_argument(
        "-L", "--liveness", metavar="URL", help="serve /healthz, e.g. http://0.0.0.0:8080/healthz"
    )
    level = p.add_mutually_exclusive_group()
    for short, name in (("-v", "verbose"), ("-d", "debug"), ("-q", "quiet")):
        level.add_argument(short, f"--{name}", action="store_true", help=f"{name} logging")
    p.add_argument(
        "--log-format", choices=["text", "json", "plain", "full"],
        help="log line format: text (kopf's full; the default) or json, one object a line",
    )  # fmt: skip
    p.add_argument("--log-refkey", metavar="KEY", help="JSON logs: the key of the object reference")
    p.add_argument("--log-prefix", action=argparse.BooleanOptionalAction, default=None,
                   help="prefix log lines with the object they are about")  # fmt: skip
    return p


def kopf_argv(argv: Sequence[str]) -> list[str]:
    """Our operator flags as `kopf run` arguments for our handlers module."""
    a = operator_parser().parse_args(list(argv))
    # kopf itself always runs alone: who acts is our Lease's to decide (runtime/leadership.py).
    out = ["run", "-m", "trainium_operator.runtime.handlers", "--standalone"]
    flags = ("all_namespaces", "verbose", "debug", "quiet")
    out += ["--all-namespaces"] if a.all_namespaces else []
    out += [f"--namespace={ns}" for ns in a.namespace]
    out += [f"--{f}" for f in flags[1:] if getattr(a, f)]
    if a.log_format == "text":
        a.log_format = "full"
    for name in ("liveness", "log_format", "log_refkey"):
        if getattr(a, name) is not None:
            out.append(f"--{name.replace('_', '-')}={getattr(a, name)}")
    if a.log_prefix is not None:
        out.append("--log-prefix" if a.log_prefix else "--no-log-prefix")
    return out


def scope_env(namespaces: Sequence[str]) -> dict[str, str]:
    """Our own watches keep to kopf's namespaces (runtime/scope.py); the handlers read this."""
    from trainium_operator.runtime import scope

    return {scope.NAMESPACES_ENV: ",".join(namespaces)} if namespaces else {}


def cmd_operator(argv: Sequence[str]) -> int:
    """`kopf run` of our handlers with the user's options (parsed here: --help is ours).

    Logging is set up and the metrics port bound first: a port that is taken is one log line
    (in the chosen format) and exit code 1.
    """
    args = kopf_argv(argv)
    a = operator_parser().parse_args(list(argv))
    import logging

    import kopf.cli

    from trainium_operator.runtime import footprint, leadership, metrics, oplog

    level = next((n for n in ("debug", "verbose", "quiet") if getattr(a, n)), None)
    oplog.configure(level, a.log_format, a.log_refkey, a.log_prefix)
    try:
        metrics.start_from_env()
    except metrics.PortTaken as exc:
        logging.getLogger("trainium_operator").critical("%s", exc)
        return 1
    footprint.cap_malloc_arenas()
    if a.lease:  # the startup handler reads it there (kopf runs our handlers module by name)
        os.environ[leadership.LEASE_ENV] = a.lease
    os.environ.update(scope_env(a.namespace))
    kopf.cli.main(args=args, prog_name="trainium operator")
    return 0
