"""`trainium logs JOB`: a job's pod logs, each line labelled with its node and rank."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trainium_operator.cli.usage import CommandError, Subcommands
from trainium_operator.local.render import UsageError

Json = dict[str, Any]


def add_logs(sub: Subcommands) -> argparse.ArgumentParser:
    """The `logs` subcommand's flags."""
    lg = sub.add_parser("logs", help="print a job's pod logs, each line labelled node/rank")
    lg.add_argument("job", help="TrainiumJob name")
    lg.add_argument("-n", "--namespace", help="default: the kubeconfig context's namespace")
    lg.add_argument("--stage", choices=["train", "precompile"], default="train")
    lg.add_argument("--node", type=int, help="only this node (pod) index")
    lg.add_argument("--rank", type=int, help="only this global rank (its node's lines)")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    return lg


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
    # Each pod's trainer container by name (TorchX names it after the role).
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
    broken = threading.Event()

    def pump(node: int, lines: Any) -> None:
        for line in lines:
            out = logs.label(line, node, target)
            if out is None:
                continue
            with lock:
                try:
                    print(out, flush=parallel)
                except BrokenPipeError:
                    if not parallel:
                        raise
                    broken.set()  # the main thread ends the command
                    return

    if not parallel:
        for node, _name, lines in streams:
            pump(node, lines)
        return
    threads = [threading.Thread(target=pump, args=(n, ln), daemon=True) for n, _, ln in streams]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():  # join with a timeout: Ctrl-C still reaches the main thread
            if broken.is_set():
                raise BrokenPipeError
            t.join(0.5)
    if broken.is_set():
        raise BrokenPipeError
