"""Live metrics over HTTP: each node's local rank 0 serves the run's gauges in Prometheus text.

The operator reads them for status.progress and hang detection; a PodMonitor may scrape them
too. Every rank computes the same rank-mean loss at a log step, so each node's server tells the
same story and the operator need not know which pod hosts global rank 0.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from trainium_trainer import contract

#: Record keys of a metrics.jsonl line and the gauge each one sets.
RECORD_GAUGES = {
    "step": contract.METRIC_STEP,
    "loss": contract.METRIC_LOSS,
    "samples_per_second": contract.METRIC_SAMPLES_PER_SECOND,
    "tokens_per_second": contract.METRIC_TOKENS_PER_SECOND,
    "lr": contract.METRIC_LR,
    "samples": contract.METRIC_SAMPLES,
}
HELP = {
    contract.METRIC_STEP: "Last optimizer step logged",
    contract.METRIC_TOTAL_STEPS: "Optimizer steps of the whole run (--max-steps)",
    contract.METRIC_LOSS: "Rank-mean training loss at the last logged step",
    contract.METRIC_SAMPLES_PER_SECOND: "Global samples per second since the previous log",
    contract.METRIC_TOKENS_PER_SECOND: "Global tokens per second since the previous log",
    contract.METRIC_LR: "Learning rate at the last logged step",
    contract.METRIC_CHECKPOINT_STEP: "Step of the last complete checkpoint",
    contract.METRIC_SAMPLES: "Global samples consumed at the last logged step",
    contract.METRIC_WORLD_SIZE: "Processes this run trains on",
    contract.METRIC_GLOBAL_BATCH_SIZE: "Samples per optimizer step over all ranks",
    contract.METRIC_GRAD_ACCUM_STEPS: "Micro-steps per optimizer step on this world size",
}


class LiveMetrics:
    """The gauges of one run; serving them is optional (no port: updates are cheap no-ops)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.gauges = {n: Gauge(n, text, registry=self.registry) for n, text in HELP.items()}
        self.node_step = Gauge(
            contract.METRIC_NODE_STEP_SECONDS,
            "Each node's rank-local seconds per step before the gradient sync (its slowest rank)",
            [contract.NODE_STEP_LABEL],
            registry=self.registry,
        )
        self._server: Any = None
        self.port: int | None = None

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Start the HTTP server (a daemon thread); port 0 picks a free one (tests)."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        self._server = server
        self.port = int(server.server_address[1])

    def start(self, step: int, total_steps: int, last_checkpoint: int, samples: int = 0) -> None:
        """Where the run starts: total steps, and the step (and samples) it resumed from."""
        self.gauges[contract.METRIC_TOTAL_STEPS].set(total_steps)
        self.gauges[contract.METRIC_STEP].set(step)
        self.gauges[contract.METRIC_CHECKPOINT_STEP].set(last_checkpoint)
        self.gauges[contract.METRIC_SAMPLES].set(samples)

    def shape(self, world_size: int, global_batch: int, accumulation: int) -> None:
        """The world size this run trains on, and the global batch its accumulation keeps."""
        self.gauges[contract.METRIC_WORLD_SIZE].set(world_size)
        self.gauges[contract.METRIC_GLOBAL_BATCH_SIZE].set(global_batch)
        self.gauges[contract.METRIC_GRAD_ACCUM_STEPS].set(accumulation)

    def log(self, record: dict[str, Any]) -> None:
        """Set the gauges from one metrics.jsonl record."""
        for key, name in RECORD_GAUGES.items():
            if isinstance(record.get(key), int | float):
                self.gauges[name].set(record[key])

    def node_steps(self, seconds: dict[int, float]) -> None:
        """Each node's rank-local step seconds by its index in the gang (stragglers)."""
        for index, value in seconds.items():
            self.node_step.labels(str(index)).set(value)

    def checkpoint(self, step: int) -> None:
        """A complete checkpoint was written at step."""
        self.gauges[contract.METRIC_CHECKPOINT_STEP].set(step)

    def close(self) -> None:
        """Stop serving (the process may train again in tests)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
