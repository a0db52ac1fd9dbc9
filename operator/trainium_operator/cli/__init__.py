"""`trainium render | run | operator | data`: argument parsing only, then the shared code paths."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from trainium_operator import __version__
from trainium_operator.cluster import fsx
from trainium_operator.local import render
from trainium_operator.local.render import UsageError

Json = dict[str, Any]

DESCRIPTION = """\
trainium: run PyTorch training on AWS Trainium from one TrainiumJob.
`render` prints offline the manifests the operator would create for a job, `run` trains a job on
this machine through the same lifecycle (TorchX's local scheduler), `operator` runs the
Kubernetes operator (kopf), `logs` prints a job's pod logs with node and rank, `data` makes
synthetic data.\
"""
EXAMPLES = """\
examples:
  trainium render -f examples/bert-large-pretrain.yaml > manifests.yaml
  trainium run -f examples/local-tiny-bert.yaml
  trainium logs bert-large-pretrain --rank 0 -f
  trainium operator --standalone --all-namespaces\
"""


class Parser(argparse.ArgumentParser):
    """Usage mistakes as one line, as kubectl and helm print them: what, and where help is."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


class CommandError(Exception):
    """A command that could not do its work (no cluster, no access): one line, exit code 1."""


def cmd_render(args: argparse.Namespace) -> int:
    """Print the manifests of every job in the file as one stream; notes go to stderr."""
    lookup = fsx.describe if args.fsx_lookup else None
    rendered = [render.render_job(doc, lookup) for doc in render.load_jobs(args.filename)]
    out = [render.strip_unknown_owner(m) for r in rendered for m in r.manifests]
    for note in (n for r in rendered for n in r.notes):
        print(f"note: {note}", file=sys.stderr)
    if args.output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": out}, indent=2))
    else:
        print(render.dump_all(out), end="")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run a job on this machine through TorchX's local scheduler."""
    from trainium_operator.local import runner as local

    docs = render.load_jobs(args.filename)
    for doc in docs:
        render.checked(doc)
    runs = Path(args.runs_dir)
    # The file is read again while each job runs: a change of runPolicy.suspend is followed.
    follow = [local.follow_file(args.filename, d["metadata"]["name"]) for d in docs]
    ok = all(local.run(doc, runs, args.quiet, f) for doc, f in zip(docs, follow, strict=True))
    return 0 if ok else 1


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


def cmd_logs(args: argparse.Namespace) -> int:
    """Print (or follow) a job's pod logs, each line labelled `node N rank R | `."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException

    from trainium_operator.cluster import k8s

    try:
        return _logs(args)
    except ConfigException as exc:
        raise CommandError(
            f"no usable kubeconfig ({exc}): set KUBECONFIG or write ~/.kube/config"
        ) from exc
    except k8s.NETWORK_ERRORS as exc:
        reason = str(getattr(exc, "reason", None) or exc).split(": ")[-1]
        host = k8s.api_client().configuration.host
        raise CommandError(f"cannot reach the Kubernetes API at {host}: {reason}") from exc
    except ApiException as exc:
        raise CommandError(
            f"the API server refused ({exc.status}): {k8s.api_message(exc)}"
        ) from exc


def _logs(args: argparse.Namespace) -> int:
    """`trainium logs` once the cluster answers."""
    from trainium_operator.cluster import k8s
    from trainium_operator.domain import logs

    ns = args.namespace or _current_namespace()
    body = k8s.get_trainiumjob(ns, args.job)
    if body is None:
        raise UsageError([f"TrainiumJob {args.job!r} not found in namespace {ns!r}"])
    nodes, nprocs = _topology(body)
    target = logs.Target(args.stage, args.node, args.rank, nprocs)
    if (wrong := logs.out_of_range(args.job, target, nodes)) is not None:
        raise UsageError([wrong])
    pods = _stage_pods(ns, body, args.stage)
    chosen = logs.select(pods, target)
    note = logs.ended_note(args.job, body.get("status") or {}, ns)
    if not chosen:
        print(f"no {args.stage} pods of job {args.job} match in namespace {ns}", file=sys.stderr)
    # Each pod's trainer container by name (TorchX names it per replica: node-0, node-1...).
    container = {str(p["metadata"]["name"]): logs.container_of(p) for p in pods}
    streams = [
        (node, name, _log_lines(ns, name, container[name], args.follow)) for node, name in chosen
    ]
    try:
        _print_labelled(streams, target, parallel=args.follow)
    except KeyboardInterrupt:
        return 130
    if note:
        print(note, file=sys.stderr)
    return 0 if chosen or note else 1


def _topology(body: Json) -> tuple[int | None, int]:
    """(nodes, processes per node) of the job; (None, 1) when its spec does not parse."""
    from trainium_operator.api.spec import SpecError, parse

    try:
        spec = parse(body)
    except SpecError:
        return None, 1
    return spec.nodes, spec.procs_per_node


def _stage_pods(namespace: str, body: Json, stage: str) -> list[Json]:
    """One stage's pods by label (Volcano copies ours onto them); the current training gang's."""
    from trainium_operator.cluster import gangs, k8s

    pods = k8s.list_pods(namespace, gangs.stage_selector(body["metadata"]["name"], stage))
    return gangs.of_current(pods, body) if stage == "train" else pods


def _current_namespace() -> str:
    """The namespace of the kubeconfig's current context, else default."""
    from kubernetes import config

    try:
        _contexts, current = config.list_kube_config_contexts()
    except (config.ConfigException, OSError, TypeError):
        return "default"
    return str((current or {}).get("context", {}).get("namespace") or "default")


def _log_lines(namespace: str, pod: str, container: str, follow: bool) -> Any:
    """The trainer container's log lines of one pod (followed: as they come)."""
    from trainium_operator.cluster import k8s

    # Raw bytes: the client's deserializer turns JSON-looking lines (the trainer's metric records)
    # into Python reprs (kubernetes-client/python#1199).
    # A urllib3 response (not preloaded), not the str the client's annotations say.
    resp: Any = k8s.core().read_namespaced_pod_log(
        pod, namespace, container=container, follow=follow, _preload_content=False
    )
    if not follow:
        return iter(resp.data.decode("utf-8", "replace").splitlines())
    return _split_stream(resp.stream())


def _split_stream(chunks: Any) -> Any:
    """Whole lines from a stream of byte chunks."""
    rest = b""
    for chunk in chunks:
        rest += chunk
        *lines, rest = rest.split(b"\n")
        yield from (ln.decode("utf-8", "replace") for ln in lines)
    if rest:
        yield rest.decode("utf-8", "replace")


def _print_labelled(streams: list[tuple[int, str, Any]], target: Any, parallel: bool) -> None:
    """Print each pod's lines labelled; followed pods stream side by side, one thread each."""
    import threading

    from trainium_operator.domain import logs

    lock = threading.Lock()

    def pump(node: int, lines: Any) -> None:
        for line in lines:
            out = logs.label(line, node, target)
            if out is not None:
                with lock:
                    print(out, flush=parallel)

    if not parallel:
        for node, _name, lines in streams:
            pump(node, lines)
        return
    threads = [threading.Thread(target=pump, args=(n, ln), daemon=True) for n, _, ln in streams]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():  # join with a timeout: Ctrl-C still reaches the main thread
            t.join(0.5)


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
    kopf.cli.main(args=args, prog_name="trainium operator")
    return 0


DATA_EXAMPLES = """\
examples:
  trainium data synth-bert --out runs/bert-synth --shards 4 --seq-len 64\
"""


def data_parser() -> argparse.ArgumentParser:
    """`trainium data TOOL`: the synthetic-data tools (the trainer's own flags)."""
    from trainium_trainer import synth

    p = Parser(
        prog="trainium data",
        description="Data tools: synthetic BERT phase-1 shards for tests and `trainium run`.",
        epilog=DATA_EXAMPLES,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    tools = p.add_subparsers(dest="tool", metavar="TOOL")
    bert = tools.add_parser("synth-bert", help=synth.DESCRIPTION, description=synth.DESCRIPTION)
    synth.add_arguments(bert)
    return p


def cmd_data(argv: Sequence[str]) -> int:
    """Synthetic data for tests and the local run."""
    try:
        p = data_parser()
    except ImportError as exc:  # numpy and h5py come with the [trainer] extra
        raise CommandError(f"trainium data needs the trainer's packages ({exc})") from exc
    args = p.parse_args(list(argv))
    if args.tool is None:
        p.error("a tool is required: synth-bert")
    from trainium_trainer import synth

    return synth.run(args)


def parser() -> argparse.ArgumentParser:
    """The `trainium` command line."""
    p = Parser(
        prog="trainium",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"trainium {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    r = sub.add_parser("render", help="print the manifests the operator would create (offline)")
    r.add_argument("-f", "--filename", required=True, help="TrainiumJob YAML file, or - for stdin")
    r.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    r.add_argument(
        "--fsx-lookup",
        action="store_true",
        help="look up FSx dnsName/mountName with your AWS credentials (fsx:DescribeFileSystems)",
    )
    run = sub.add_parser("run", help="run a TrainiumJob on this machine (TorchX local scheduler)")
    run.add_argument("-f", "--filename", required=True)
    run.add_argument("--runs-dir", default="runs", help="where runs/<job>/ goes (default ./runs)")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    lg = sub.add_parser("logs", help="print a job's pod logs, each line labelled node/rank")
    lg.add_argument("job", help="TrainiumJob name")
    lg.add_argument("-n", "--namespace", help="default: the kubeconfig context's namespace")
    lg.add_argument("--stage", choices=["train", "precompile"], default="train")
    lg.add_argument("--node", type=int, help="only this node (pod) index")
    lg.add_argument("--rank", type=int, help="only this global rank (its node's lines)")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    sub.add_parser("operator", help="run the operator (`trainium operator --help`)", add_help=False)
    sub.add_parser("data", help="data tools: synth-bert (`trainium data --help`)", add_help=False)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `trainium` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["operator"]:
            return cmd_operator(argv[1:])
        if argv[:1] == ["data"]:
            return cmd_data(argv[1:])
        p = parser()
        args = p.parse_args(argv)
        if args.command is None:
            p.error("a command is required: render, run, logs, operator or data")
        commands = {"render": cmd_render, "run": cmd_run, "logs": cmd_logs}
        return int(commands[args.command](args))
    except UsageError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    except CommandError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
