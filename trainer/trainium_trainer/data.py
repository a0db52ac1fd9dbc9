"""One global, seeded sample order split over ranks; BERT phase-1 HDF5 shards in AWS's layout.

Every epoch is one permutation of all samples (a seeded shard order, and a seeded order within
each shard), the same on every rank and for every world size. An optimizer step consumes the next
global-batch samples of it in chunks of --batch-size: micro-step m of rank r takes chunk
m x world + r. So a step sees the same chunks whatever the world size (only the order of the
float sums differs), and where the data continues is decided by the samples consumed: a run
resumed on another world size sees exactly what an unbroken one would have seen. A rank holds one
shard in memory at a time (its chunks move through the epoch's shard order, so it loads each
shard once an epoch); the ranks of a node load the same shard at about the same time, which the
page cache serves from one read. (h5py's row selection costs more than a whole small shard: 4 ms
for 8 rows against 2 ms for 64.)
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from trainium_trainer.config import UsageError

Arrays = dict[str, np.ndarray]

BERT_KEYS = (
    "input_ids",
    "segment_ids",
    "input_mask",
    "masked_lm_positions",
    "masked_lm_ids",
    "next_sentence_labels",
)
BERT_SHARD_GLOB = "*_training_*.hdf5"
IGNORE_INDEX = -100


@dataclasses.dataclass(frozen=True)
class Shard:
    """One unit of data on disk (a file) or in memory, with a known sample count."""

    name: str
    length: int
    load: Callable[[], Arrays]


class GlobalOrder:
    """The endless sample order of all shards: epoch after epoch, each one permutation."""

    def __init__(self, shards: Sequence[Shard], seed: int) -> None:
        self.shards, self.seed = list(shards), seed
        self.total = sum(s.length for s in self.shards)
        if self.total == 0:
            raise UsageError("the training data holds no samples")
        self._layout: tuple[int, np.ndarray, np.ndarray] | None = None
        self._perm: tuple[int, int, np.ndarray] | None = None
        self._loaded: tuple[int, Arrays] | None = None

    def layout(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(shard indices in the epoch's order, the epoch offset where each one starts)."""
        if self._layout is None or self._layout[0] != epoch:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.shards))
            lengths = np.array([self.shards[i].length for i in order], dtype=np.int64)
            self._layout = (epoch, order, np.concatenate([[0], np.cumsum(lengths)[:-1]]))
        return self._layout[1], self._layout[2]

    def permutation(self, epoch: int, index: int) -> np.ndarray:
        """The order of one shard's rows in one epoch (the last one asked is kept)."""
        if self._perm is None or self._perm[:2] != (epoch, index):
            shard = self.shards[index]
            rng = np.random.default_rng([self.seed, epoch, _stable_id(shard.name)])
            self._perm = (epoch, index, rng.permutation(shard.length))
        return self._perm[2]

    def segments(self, start: int, count: int) -> Iterator[tuple[int, np.ndarray]]:
        """Samples [start, start + count) of the order as (shard index, rows) runs."""
        pos, end = start, start + count
        while pos < end:
            epoch, offset = divmod(pos, self.total)
            order, starts = self.layout(epoch)
            k = int(np.searchsorted(starts, offset, side="right")) - 1
            within = offset - int(starts[k])
            n = min(end - pos, self.shards[order[k]].length - within)
            yield int(order[k]), self.permutation(epoch, int(order[k]))[within : within + n]
            pos += n

    def arrays(self, index: int) -> Arrays:
        """One shard's arrays, loaded when first asked (the last one loaded is kept)."""
        if self._loaded is None or self._loaded[0] != index:
            self._loaded = None  # free the previous shard before loading the next
            self._loaded = (index, self.shards[index].load())
        return self._loaded[1]

    def read(self, start: int, count: int) -> Arrays:
        """The arrays of samples [start, start + count), in the order's sequence."""
        parts = [
            {k: v[rows] for k, v in self.arrays(i).items()}
            for i, rows in self.segments(start, count)
        ]
        if len(parts) == 1:
            return parts[0]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def rank_stream(
    order: GlobalOrder, batch_size: int, world_size: int, rank: int, accum: int, start: int = 0
) -> Iterator[Arrays]:
    """This rank's micro-batches from global sample `start` on (a step's first sample)."""
    step_start = start
    while True:
        for micro in range(accum):
            yield order.read(step_start + (micro * world_size + rank) * batch_size, batch_size)
        step_start += batch_size * world_size * accum


def _stable_id(name: str) -> int:
    """A seed component from a shard name that does not depend on PYTHONHASHSEED."""
    return zlib.crc32(name.encode())


def find_bert_shards(data_dir: Path | None) -> list[Path]:
    """The `*_training_*.hdf5` files of data_dir, sorted so every rank agrees on the list."""
    if data_dir is None:
        raise UsageError("--data-dir is required for bert-pretrain")
    if not data_dir.is_dir():
        raise UsageError(f"data dir {data_dir} does not exist or is not a directory")
    paths = sorted(data_dir.glob(BERT_SHARD_GLOB))
    if not paths:
        raise UsageError(f"no {BERT_SHARD_GLOB} shards in {data_dir}")
    return paths


def bert_shard(path: Path, seq_len: int) -> Shard:
    """Open one HDF5 shard lazily, checking keys and sequence length up front."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            missing = [k for k in BERT_KEYS if k not in f]
            if missing:
                raise UsageError(f"{path.name}: missing HDF5 keys {', '.join(missing)}")
            length = int(f["input_ids"].shape[0])
            width = int(f["input_ids"].shape[1])
    except OSError as exc:
        raise UsageError(f"{path.name}: not a readable HDF5 file ({exc})") from exc
    if width != seq_len:
        raise UsageError(f"{path.name}: sequences are {width} long but --seq-len is {seq_len}")
    return Shard(path.name, length, lambda: _read_bert(path))


def _read_bert(path: Path) -> Arrays:
    """The whole shard as model inputs (MLM labels scattered to token positions)."""
    import h5py

    with h5py.File(path, "r") as f:
        raw = {k: np.asarray(f[k][:]) for k in BERT_KEYS}
    return bert_inputs(raw)


def bert_inputs(raw: Arrays) -> Arrays:
    """AWS's (masked_lm_positions, masked_lm_ids) to per-token labels, -100 where unmasked."""
    input_ids = raw["input_ids"].astype(np.int64)
    positions = raw["masked_lm_positions"].astype(np.int64)
    labels = np.full_like(input_ids, IGNORE_INDEX)
    rows = np.repeat(np.arange(len(input_ids)), positions.shape[1]).reshape(positions.shape)
    valid = positions > 0  # position 0 is [CLS], so 0 marks padding of the prediction list
    labels[rows[valid], positions[valid]] = raw["masked_lm_ids"].astype(np.int64)[valid]
    return {
        "input_ids": input_ids,
        "token_type_ids": raw["segment_ids"].astype(np.int64),
        "attention_mask": raw["input_mask"].astype(np.int64),
        "labels": labels,
        "next_sentence_label": raw["next_sentence_labels"].astype(np.int64).reshape(-1),
    }


def bert_shards(data_dir: Path | None, seq_len: int) -> list[Shard]:
    """Every BERT shard (all ranks read from all), validated before any training starts."""
    return [bert_shard(p, seq_len) for p in find_bert_shards(data_dir)]


def memory_shard(arrays: Arrays, name: str) -> Shard:
    """In-memory rows as one shard (text tasks come as one corpus)."""
    return Shard(name, len(next(iter(arrays.values()))), lambda: arrays)


def split_rows(arrays: Arrays, fraction: float, seed: int) -> tuple[Arrays, Arrays | None]:
    """(training rows, held-out rows or None): a seeded shuffle, the same on every rank."""
    count = len(next(iter(arrays.values())))
    held = round(count * fraction)
    if held == 0:
        return arrays, None
    order = np.random.default_rng([seed, count]).permutation(count)
    train, evaluate = np.sort(order[held:]), np.sort(order[:held])
    return {k: v[train] for k, v in arrays.items()}, {k: v[evaluate] for k, v in arrays.items()}
