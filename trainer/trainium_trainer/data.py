"""Sharded, deterministic, resumable batch streams; BERT phase-1 HDF5 shards in AWS's layout.

A rank reads only its own shards. The order of shards and of samples within a shard is a pure
function of (seed, epoch, shard), so a resumed run skips to its position without reading data and
then sees exactly the batches an unbroken run would have seen.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from trainium_trainer.config import UsageError

Arrays = dict[str, np.ndarray]
T = TypeVar("T")

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
    """One unit of data ownership: a file (or a slice of rows) with a known sample count."""

    name: str
    length: int
    load: Callable[[], Arrays]


def rank_shards(shards: Sequence[T], rank: int, world_size: int) -> list[T]:
    """Every world_size-th shard, so ranks never read each other's data."""
    if len(shards) < world_size:
        raise UsageError(f"{len(shards)} data shards for {world_size} ranks; need one or more each")
    return list(shards[rank::world_size])


def batch_stream(
    shards: Sequence[Shard], batch_size: int, seed: int, start: int = 0
) -> Iterator[Arrays]:
    """Endless fixed-size batches (drop_last per shard), starting after `start` batches."""
    per_shard = [s.length // batch_size for s in shards]
    if sum(per_shard) == 0:
        raise UsageError(f"no shard of this rank holds --batch-size {batch_size} samples")
    epoch, skip = divmod(start, sum(per_shard))
    while True:
        order = np.random.default_rng([seed, epoch]).permutation(len(shards))
        for index in order:
            if skip >= per_shard[index]:
                skip -= per_shard[index]
                continue
            shard = shards[index]
            perm = np.random.default_rng([seed, epoch, _stable_id(shard.name)]).permutation(
                shard.length
            )
            arrays = shard.load()
            for b in range(skip, per_shard[index]):
                rows = np.sort(perm[b * batch_size : (b + 1) * batch_size])
                yield {k: v[rows] for k, v in arrays.items()}
            skip = 0
        epoch += 1


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


def bert_rank_shards(data_dir: Path | None, seq_len: int, rank: int, world: int) -> list[Shard]:
    """This rank's BERT shards, validated before any training starts."""
    paths = rank_shards(find_bert_shards(data_dir), rank, world)
    return [bert_shard(p, seq_len) for p in paths]


def row_shards(arrays: Arrays, world_size: int, name: str) -> list[Shard]:
    """Split in-memory rows into one shard per rank (text tasks come as one corpus)."""
    count = len(next(iter(arrays.values())))
    if count < world_size:
        raise UsageError(f"{count} samples for {world_size} ranks; need at least one each")
    parts = [{k: v[r::world_size] for k, v in arrays.items()} for r in range(world_size)]
    return [Shard(f"{name}-{r}", len(p["input_ids"]), _constant(p)) for r, p in enumerate(parts)]


def split_rows(arrays: Arrays, fraction: float, seed: int) -> tuple[Arrays, Arrays | None]:
    """(training rows, held-out rows or None): a seeded shuffle, the same on every rank."""
    count = len(next(iter(arrays.values())))
    held = round(count * fraction)
    if held == 0:
        return arrays, None
    order = np.random.default_rng([seed, count]).permutation(count)
    train, evaluate = np.sort(order[held:]), np.sort(order[:held])
    return {k: v[train] for k, v in arrays.items()}, {k: v[evaluate] for k, v in arrays.items()}


def _constant(arrays: Arrays) -> Callable[[], Arrays]:
    """A loader for rows already in memory."""
    return lambda: arrays
