"""Local text data for the classification and causal-LM tasks, and a built-in tokenizer.

The built-in tokenizer (a word or character vocabulary built from the data) lets tests and
air-gapped clusters train without any hub download; a real tokenizer comes from a local directory.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from trainium_trainer.config import UsageError
from trainium_trainer.data import Arrays

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")
WORD = re.compile(r"\w+|[^\w\s]")


class Tokenizer(Protocol):
    """What the text tasks need from a tokenizer."""

    vocab_size: int
    pad_id: int

    def encode_batch(self, texts: Sequence[str], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, attention mask), each (len(texts), seq_len), [CLS] .. [SEP] then padding."""
        ...

    def encode_stream(self, text: str) -> list[int]:
        """Ids for running text (no specials), for causal LM."""
        ...


class SimpleTokenizer:
    """Word (lower-cased) or character vocabulary built deterministically from the data."""

    pad_id, unk_id, cls_id, sep_id = 0, 1, 2, 3

    def __init__(self, vocab: Sequence[str], mode: str) -> None:
        self.mode = mode
        self.vocab = list(vocab)
        self.index = {t: i for i, t in enumerate(self.vocab)}
        self.vocab_size = len(self.vocab)

    @classmethod
    def build(cls, texts: Iterable[str], mode: str, max_size: int = 30000) -> SimpleTokenizer:
        """Most frequent tokens first, ties broken alphabetically, so every rank agrees."""
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(cls._split(text, mode))
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        tokens = [t for t, _ in ranked[: max_size - len(SPECIALS)]]
        return cls([*SPECIALS, *tokens], mode)

    @staticmethod
    def _split(text: str, mode: str) -> list[str]:
        return list(text) if mode == "char" else WORD.findall(text.lower())

    def encode_stream(self, text: str) -> list[int]:
        """Ids of text, unknown tokens as [UNK]."""
        return [self.index.get(t, self.unk_id) for t in self._split(text, self.mode)]

    def encode_batch(self, texts: Sequence[str], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
        """[CLS] ids [SEP], truncated and padded to seq_len."""
        ids = np.full((len(texts), seq_len), self.pad_id, dtype=np.int64)
        for row, text in enumerate(texts):
            seq = [self.cls_id, *self.encode_stream(text)[: seq_len - 2], self.sep_id]
            ids[row, : len(seq)] = seq
        return ids, (ids != self.pad_id).astype(np.int64)

    def to_transformers(self) -> Any:
        """The same vocabulary and splitting as a transformers fast tokenizer, for export.

        Word mode lower-cases and splits like WORD and wraps text in [CLS] .. [SEP]; char mode
        maps every character (causal LM adds no specials).
        """
        from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, processors
        from transformers import PreTrainedTokenizerFast

        tok = Tokenizer(models.WordLevel(self.index, unk_token=SPECIALS[self.unk_id]))
        if self.mode == "char":
            tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        else:
            tok.normalizer = normalizers.Lowercase()
            split = pre_tokenizers.Split(Regex(WORD.pattern), behavior="isolated")
            tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), split])
            specials = [(SPECIALS[self.cls_id], self.cls_id), (SPECIALS[self.sep_id], self.sep_id)]
            template = f"{SPECIALS[self.cls_id]} $A {SPECIALS[self.sep_id]}"
            tok.post_processor = processors.TemplateProcessing(
                single=template, special_tokens=specials
            )
        names = ("pad_token", "unk_token", "cls_token", "sep_token")
        roles = dict(zip(names, SPECIALS, strict=True))
        return PreTrainedTokenizerFast(tokenizer_object=tok, **roles)


class HFTokenizer:
    """A transformers tokenizer loaded from a local directory (or the hub if allowed)."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        self.vocab_size = len(tok)
        if tok.pad_token is None:  # GPT-2 style tokenizers have none; padding reuses EOS
            tok.pad_token = tok.eos_token or tok.unk_token
        self.pad_id = int(tok.pad_token_id)

    def encode_stream(self, text: str) -> list[int]:
        """Ids of running text without special tokens."""
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def encode_batch(self, texts: Sequence[str], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
        """The tokenizer's own specials, padded to seq_len."""
        enc = self.tok(
            list(texts),
            padding="max_length",
            truncation=True,
            max_length=seq_len,
            return_tensors="np",
        )
        return enc["input_ids"].astype(np.int64), enc["attention_mask"].astype(np.int64)


#: Files any transformers tokenizer directory has at least one of.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "tokenizer.model",
)


def load_tokenizer(path: str | None, texts: Sequence[str], mode: str, allow_download: bool) -> Any:
    """A local dir or cached hub id when given, else a vocabulary built from the training texts."""
    if path is None:
        return SimpleTokenizer.build(texts, mode)
    from transformers import AutoTokenizer

    if Path(path).is_dir() and not any((Path(path) / name).exists() for name in TOKENIZER_FILES):
        # transformers would fail with a TypeError deep inside (its vocab file path is None).
        msg = f"{path} holds no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}, ...)"
        raise UsageError(f"{msg}; name a tokenizer directory with --tokenizer")
    try:
        return HFTokenizer(AutoTokenizer.from_pretrained(path, local_files_only=not allow_download))
    except (OSError, ValueError, TypeError) as exc:
        if not allow_download and not Path(path).exists():
            where = "no such directory, nor in the $HF_HOME cache"
            msg = f"tokenizer {path} not found locally ({where}; --allow-download for the hub)"
            raise UsageError(msg) from exc
        raise UsageError(f"cannot load tokenizer {path}: {str(exc).splitlines()[0]}") from exc


#: The vocabulary BERT's pretraining shards index, beside them (synth.py writes one).
VOCAB_FILE = "vocab.txt"
_FULL_TOKENIZER = ("tokenizer.json", "tokenizer_config.json")


def bert_vocab_tokenizer(vocab: Path) -> HFTokenizer:
    """BERT's lower-casing WordPiece over a vocab.txt, as create_pretraining_data tokenized."""
    from transformers import BertTokenizerFast

    try:
        return HFTokenizer(BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True))
    except (OSError, ValueError, TypeError) as exc:
        raise UsageError(f"cannot read vocabulary {vocab}: {str(exc).splitlines()[0]}") from exc


def pretraining_tokenizer(
    given: str | None, data_dir: Path | None, allow_download: bool
) -> tuple[Any, str | None]:
    """(tokenizer, source) of BERT shards: --tokenizer, else the data dir's vocab.txt, else none.

    The shards hold token ids only; the export needs the vocabulary they were made with.
    """
    if given is None:
        vocab = data_dir / VOCAB_FILE if data_dir is not None else None
        if vocab is None or not vocab.is_file():
            return None, None
        return bert_vocab_tokenizer(vocab), str(vocab)
    path = Path(given)
    if path.is_file():  # a vocab.txt itself
        return bert_vocab_tokenizer(path), given
    if (path / VOCAB_FILE).is_file() and not any((path / f).exists() for f in _FULL_TOKENIZER):
        return bert_vocab_tokenizer(path / VOCAB_FILE), given
    return load_tokenizer(given, [], "word", allow_download), given


def _data_files(data_dir: Path | None, suffixes: tuple[str, ...], task: str) -> list[Path]:
    """Files of data_dir (or data_dir itself) with one of suffixes, sorted."""
    if data_dir is None:
        raise UsageError(f"--data-dir is required for {task}")
    if not data_dir.exists():
        raise UsageError(f"data dir {data_dir} does not exist")
    files = [data_dir] if data_dir.is_file() else sorted(data_dir.iterdir())
    files = [f for f in files if f.suffix in suffixes]
    if not files:
        raise UsageError(f"no {'/'.join(suffixes)} files in {data_dir}")
    return files


def read_labelled(data_dir: Path | None) -> tuple[list[str], list[str]]:
    """(texts, labels) from CSV (header text,label) and JSONL ({"text", "label"}) files."""
    texts, labels = [], []
    for path in _data_files(data_dir, (".csv", ".jsonl"), "text-classification"):
        with path.open(newline="", encoding="utf-8") as f:
            rows: Iterable[dict[str, Any]]
            if path.suffix == ".csv":
                rows = csv.DictReader(f)
            else:
                rows = (json.loads(line) for line in f if line.strip())
            for n, row in enumerate(rows, 1):
                if "text" not in row or "label" not in row:
                    raise UsageError(f"{path.name} row {n}: needs 'text' and 'label' fields")
                texts.append(str(row["text"]))
                labels.append(str(row["label"]))
    return texts, labels


def classification_arrays(texts: list[str], labels: list[str], tok: Any, seq_len: int) -> Arrays:
    """Fixed-shape inputs; label names map to ids in sorted order."""
    names = sorted(set(labels))
    ids, mask = tok.encode_batch(texts, seq_len)
    label_ids = np.array([names.index(lbl) for lbl in labels], dtype=np.int64)
    return {"input_ids": ids, "attention_mask": mask, "labels": label_ids}


def read_corpus(data_dir: Path | None) -> list[str]:
    """The text of every .txt file of data_dir, in name order."""
    files = _data_files(data_dir, (".txt",), "causal-lm")
    return [f.read_text(encoding="utf-8") for f in files]


def lm_arrays(docs: list[str], tok: Any, seq_len: int) -> Arrays:
    """Concatenated ids cut into seq_len blocks; the model shifts labels itself."""
    stream: list[int] = []
    for doc in docs:
        stream.extend(tok.encode_stream(doc))
    blocks = len(stream) // seq_len
    if blocks == 0:
        raise UsageError(f"corpus has {len(stream)} tokens, fewer than --seq-len {seq_len}")
    ids = np.asarray(stream[: blocks * seq_len], dtype=np.int64).reshape(blocks, seq_len)
    return {"input_ids": ids, "labels": ids.copy()}
