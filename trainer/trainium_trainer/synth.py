"""Synthetic BERT phase-1 shards in AWS's HDF5 layout, with a task a tiny model can learn.

Tokens follow a sparse Markov chain (each token has one likely successor), so masked tokens are
predictable from their neighbours and the MLM loss falls within a few dozen steps. Segment B
continues A's chain when it is the next sentence and follows a different chain otherwise, so the
NSP label is predictable from the segments. Noise would test nothing.

    python -m trainium_trainer.synth --out DIR --shards N --samples-per-shard M --seq-len L
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy (the [trainer] extra) is imported where shards are made: the flags and
    import numpy as np  # `trainium data --help` work in an operator-only install

PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = 0, 100, 101, 102, 103  # bert-base-uncased's ids
FIRST_WORD = 104
#: Beside the shards: the vocabulary their ids index (the trainer saves it as the tokenizer).
VOCAB_FILE = "vocab.txt"
FOLLOW_PROB = 0.9
WORDS = 64  # distinct words used: few enough that a tiny model learns the chain in ~100 steps
MASK_RATE = 0.15


def max_predictions(seq_len: int) -> int:
    """Width of the masked-position lists (20 for seq_len 128, as in AWS's data)."""
    return math.ceil(MASK_RATE * seq_len)


def _chain(rng: np.random.Generator, succ: np.ndarray, start: int, n: int) -> list[int]:
    """n word indices from start: usually the fixed successor, sometimes a random word."""
    out, word = [], start
    for _ in range(n):
        out.append(word)
        word = int(succ[word]) if rng.random() < FOLLOW_PROB else int(rng.integers(len(succ)))
    return out


def _mask(
    rng: np.random.Generator, ids: np.ndarray, words: np.ndarray, vocab: int, width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BERT's 80/10/10 masking of ~15% of the words; returns (ids, positions, labels)."""
    import numpy as np

    count = min(width, max(1, round(MASK_RATE * len(words))))
    positions = np.sort(rng.choice(words, size=count, replace=False))
    labels = ids[positions].copy()
    masked = ids.copy()
    for pos in positions:
        roll = rng.random()
        if roll < 0.8:
            masked[pos] = MASK_ID
        elif roll < 0.9:
            masked[pos] = rng.integers(FIRST_WORD, vocab)  # BERT draws from the whole vocab
    pad = width - count
    return masked, np.pad(positions, (0, pad)), np.pad(labels, (0, pad))


def _sample(
    rng: np.random.Generator, chains: Sequence[np.ndarray], seq_len: int, vocab: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """One [CLS] A [SEP] B [SEP] example and its label (0 = B follows A, as in BERT)."""
    import numpy as np

    words = int(rng.integers((3 * seq_len) // 4, seq_len + 1)) - 3
    len_a = int(rng.integers(max(1, words // 3), max(2, (2 * words) // 3)))
    n_words = len(chains[0])
    seg_a = _chain(rng, chains[0], int(rng.integers(n_words)), len_a + 1)
    is_random = int(rng.random() < 0.5)
    start = int(rng.integers(n_words)) if is_random else seg_a[-1]
    seg_b = _chain(rng, chains[is_random], start, words - len_a)
    ids_a = [FIRST_WORD + w for w in seg_a[:-1]]
    tokens = [CLS_ID, *ids_a, SEP_ID, *(FIRST_WORD + w for w in seg_b), SEP_ID]
    ids = np.full(seq_len, PAD_ID, dtype=np.int32)
    ids[: len(tokens)] = tokens
    segments = np.zeros(seq_len, dtype=np.int32)
    segments[len_a + 2 : len(tokens)] = 1
    mask = (ids != PAD_ID).astype(np.int32)
    word_pos = np.array([i for i, t in enumerate(tokens) if t not in (CLS_ID, SEP_ID)])
    masked, positions, labels = _mask(rng, ids, word_pos, vocab, max_predictions(seq_len))
    return masked, segments, mask, positions, labels, is_random


def write_bert_shards(
    out_dir: Path | str,
    shards: int,
    samples_per_shard: int,
    seq_len: int = 64,
    vocab_size: int = 1024,
    seed: int = 0,
) -> list[Path]:
    """Write `synth_training_{i}.hdf5` shards with AWS's keys and their vocab.txt; the shards."""
    import h5py
    import numpy as np

    from trainium_trainer.data import BERT_KEYS

    if vocab_size <= FIRST_WORD + 1 or seq_len < 8:
        raise ValueError(f"need vocab_size > {FIRST_WORD + 1} and seq_len >= 8")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = np.random.default_rng(seed)
    n_words = min(WORDS, vocab_size - FIRST_WORD)
    chains = tuple(base.permutation(n_words) for _ in range(2))
    paths = []
    for index in range(shards):
        rng = np.random.default_rng([seed, index])
        rows = [_sample(rng, chains, seq_len, vocab_size) for _ in range(samples_per_shard)]
        cols = [np.stack(c) for c in zip(*rows, strict=True)]
        path = out / f"synth_training_{index}.hdf5"
        with h5py.File(path, "w") as f:
            for key, col, dtype in zip(BERT_KEYS, cols, _DTYPES, strict=True):
                f.create_dataset(key, data=col.astype(dtype))
        paths.append(path)
    write_vocab(out / VOCAB_FILE, vocab_size)
    return paths


def write_vocab(path: Path, vocab_size: int) -> None:
    """A WordPiece vocab.txt in bert-base-uncased's layout: specials at its ids, words `w<id>`."""
    names = {PAD_ID: "[PAD]", UNK_ID: "[UNK]", CLS_ID: "[CLS]", SEP_ID: "[SEP]", MASK_ID: "[MASK]"}
    tokens = [
        names.get(i) or (f"[unused{i - 1}]" if i < UNK_ID else f"w{i}") for i in range(vocab_size)
    ]
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")


_DTYPES = ("i4", "i4", "i4", "i4", "i4", "i1")  # NVIDIA/AWS create_pretraining_data's dtypes


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags, shared by `python -m trainium_trainer.synth` and `trainium data synth-bert`."""
    p.add_argument("--out", type=Path, required=True, help="directory for the shards")
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--samples-per-shard", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--vocab-size", type=int, default=1024, help="1024 fits --model-config tiny")
    p.add_argument("--seed", type=int, default=0)


def build_parser() -> argparse.ArgumentParser:
    """`python -m trainium_trainer.synth`."""
    p = argparse.ArgumentParser(prog="synth-bert", description=DESCRIPTION)
    add_arguments(p)
    return p


DESCRIPTION = __doc__.splitlines()[0]


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags, then write the shards."""
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Write the shards and print where they went."""
    if args.shards < 1 or args.samples_per_shard < 1:
        print("error: --shards and --samples-per-shard must be >= 1", file=sys.stderr)
        return 2
    try:
        paths = write_bert_shards(
            args.out, args.shards, args.samples_per_shard, args.seq_len, args.vocab_size, args.seed
        )
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(paths)} shards x {args.samples_per_shard} samples to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
