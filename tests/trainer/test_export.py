"""Models people can use: eval metrics, save_pretrained output transformers loads, --pretrained."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from trainer_utils import run_trainer, summary

from trainium_trainer.__main__ import main
from trainium_trainer.text import SimpleTokenizer

CLASSIFY = ["--seq-len", "16", "--batch-size", "8", "--lr", "0.003", "--precision", "fp32"]
LM = ["--seq-len", "32", "--batch-size", "8", "--lr", "0.003", "--precision", "fp32"]


def _write_classification(data: Path) -> None:
    data.mkdir()
    rows = [(f"good great fine film {i}", "pos") for i in range(40)]
    rows += [(f"bad awful poor film {i}", "neg") for i in range(40)]
    rows += [(f"a film about {i} things", "meh") for i in range(40)]
    jsonl = [json.dumps({"text": t, "label": lbl}) for t, lbl in rows]
    (data / "train.jsonl").write_text("\n".join(jsonl) + "\n", encoding="utf-8")


def _write_corpus(data: Path) -> None:
    data.mkdir()
    (data / "a.txt").write_text("the quick brown fox jumps over the lazy dog. " * 60)
    (data / "b.txt").write_text("pack my box with five dozen liquor jugs. " * 60)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A text classifier trained from scratch (built-in vocabulary), exported."""
    root = tmp_path_factory.mktemp("cls")
    _write_classification(root / "data")
    out = root / "out"
    args = ["text-classification", "--data-dir", str(root / "data"), "--output-dir", str(out)]
    assert main([*args, "--max-steps", "30", *CLASSIFY]) == 0
    return out


def test_classifier_reports_accuracy_on_held_out_rows(classifier: Path) -> None:
    result = summary(classifier)
    assert result["eval_samples"] == 12  # 10% of 120
    assert result["eval_accuracy"] >= 0.9, result
    assert math.isfinite(result["eval_loss"])


def test_classifier_loads_back_with_transformers(classifier: Path) -> None:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model_dir = Path(summary(classifier)["model_dir"])
    assert model_dir == classifier / "model"
    assert (model_dir / "model.safetensors").is_file()
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert model.config.id2label == {0: "meh", 1: "neg", 2: "pos"}
    enc = tok(["good great fine film 7", "bad awful poor film 3"], return_tensors="pt")
    with torch.no_grad():
        predicted = model(**enc).logits.argmax(-1).tolist()
    assert [model.config.id2label[i] for i in predicted] == ["pos", "neg"]


def test_exported_tokenizer_matches_the_built_in_one(classifier: Path) -> None:
    from transformers import AutoTokenizer

    texts = ["Good, great film!", "an unseen word: zebra", "bad  awful\tpoor"]
    ours = SimpleTokenizer.build(
        [json.loads(x)["text"] for x in (classifier.parent / "data" / "train.jsonl").open()],
        "word",
    )
    ids, mask = ours.encode_batch(texts, 16)
    tok = AutoTokenizer.from_pretrained(classifier / "model")
    enc = tok(texts, padding="max_length", truncation=True, max_length=16, return_tensors="np")
    assert enc["input_ids"].tolist() == ids.tolist()
    assert enc["attention_mask"].tolist() == mask.tolist()


def test_fine_tuning_starts_from_a_local_pretrained_model(classifier: Path, tmp_path: Path) -> None:
    out = tmp_path / "again"
    data = classifier.parent / "data"
    args = ["text-classification", "--data-dir", str(data), "--output-dir", str(out)]
    pretrained = str(classifier / "model")
    assert main([*args, "--max-steps", "2", "--pretrained", pretrained, *CLASSIFY]) == 0
    assert summary(out)["initial_loss"] < 0.5 * summary(classifier)["initial_loss"]


def test_pretrained_hub_id_from_a_pre_seeded_hf_home(classifier: Path, tmp_path: Path) -> None:
    """A hub id resolves offline from $HF_HOME's cache (how a cluster pre-seeds models)."""
    snapshot = tmp_path / "hf" / "hub" / "models--acme--tiny-cls" / "snapshots" / ("0" * 40)
    shutil.copytree(classifier / "model", snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    out = tmp_path / "out"
    data = classifier.parent / "data"
    args = ["text-classification", "--data-dir", str(data), "--output-dir", str(out)]
    args += ["--max-steps", "2", "--pretrained", "acme/tiny-cls", *CLASSIFY]
    proc = run_trainer(args, env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary(out)["initial_loss"] < 0.5 * summary(classifier)["initial_loss"]


def test_missing_pretrained_model_is_one_line(
    tmp_path: Path, classifier: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = classifier.parent / "data"
    args = ["text-classification", "--data-dir", str(data), "--output-dir", str(tmp_path)]
    code = main([*args, "--pretrained", str(tmp_path / "nothing-here")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert "nothing-here" in err[0]


def test_causal_lm_reports_perplexity_and_loads_back(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data, out = tmp_path / "data", tmp_path / "out"
    _write_corpus(data)
    args = ["causal-lm", "--data-dir", str(data), "--output-dir", str(out), "--max-steps", "30"]
    assert main([*args, *LM]) == 0
    result = summary(out)
    assert result["eval_perplexity"] == pytest.approx(math.exp(result["eval_loss"]))
    assert result["eval_perplexity"] < 20, result  # ~30 characters in the vocabulary
    model = AutoModelForCausalLM.from_pretrained(out / "model").eval()
    tok = AutoTokenizer.from_pretrained(out / "model")
    ids = tok("the quick brown fox", return_tensors="pt")["input_ids"]
    assert ids.shape[1] == len("the quick brown fox")
    with torch.no_grad():
        loss = model(input_ids=ids, labels=ids).loss.item()
    assert loss < math.log(tok.vocab_size)


def test_bert_pretrain_saves_a_tied_hf_model(bert_data: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForPreTraining

    args = ["bert-pretrain", "--data-dir", str(bert_data), "--output-dir", str(tmp_path)]
    assert main([*args, "--max-steps", "3", "--precision", "fp32"]) == 0
    model = AutoModelForPreTraining.from_pretrained(tmp_path / "model")
    decoder = model.cls.predictions.decoder.weight
    assert decoder is model.bert.embeddings.word_embeddings.weight


def _bert_run(data: Path, out: Path, *extra: str) -> int:
    args = ["bert-pretrain", "--data-dir", str(data), "--output-dir", str(out), *extra]
    return main([*args, "--max-steps", "2", "--precision", "fp32"])


def _shards_only(bert_data: Path, where: Path) -> Path:
    """The synthetic shards without the vocabulary they were made with (as AWS ships its data)."""
    where.mkdir()
    for shard in bert_data.glob("*.hdf5"):
        shutil.copy(shard, where / shard.name)
    return where


def test_synthetic_shards_come_with_their_vocabulary(bert_data: Path) -> None:
    vocab = (bert_data / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == 1024  # --vocab-size, the tiny model's
    # bert-base-uncased's places: the ids synth.py writes mean what they mean there.
    assert (vocab[0], vocab[100], vocab[101], vocab[102], vocab[103]) == (
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    )  # fmt: skip


def test_bert_pretrain_saves_the_tokenizer_its_shards_were_made_with(
    bert_data: Path, tmp_path: Path
) -> None:
    import h5py
    from transformers import AutoModelForPreTraining, AutoTokenizer

    assert _bert_run(bert_data, tmp_path) == 0
    model_dir = tmp_path / "model"
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForPreTraining.from_pretrained(model_dir)
    assert len(tok) == model.config.vocab_size
    assert (tok.pad_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id) == (
        0, 101, 102, 103,
    )  # fmt: skip
    with h5py.File(sorted(bert_data.glob("*.hdf5"))[0]) as f:
        row = [int(i) for i in f["input_ids"][0] if i != 0]
    text = tok.decode(row)  # "[CLS] w120 w161 [MASK] ... [SEP] ... [SEP]": ids read as text
    assert tok(text, add_special_tokens=False)["input_ids"] == row
    assert summary(tmp_path)["tokenizer"] == str(bert_data / "vocab.txt")


def test_bert_pretrain_takes_the_vocabulary_from_the_tokenizer_flag(
    bert_data: Path, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    data = _shards_only(bert_data, tmp_path / "data")
    vocab_dir = tmp_path / "bert-vocab"
    vocab_dir.mkdir()
    shutil.copy(bert_data / "vocab.txt", vocab_dir / "vocab.txt")
    assert _bert_run(data, tmp_path / "out", "--tokenizer", str(vocab_dir)) == 0
    tok = AutoTokenizer.from_pretrained(tmp_path / "out" / "model")
    assert tok.convert_ids_to_tokens([101, 103, 104]) == ["[CLS]", "[MASK]", "w104"]


def test_bert_pretrain_without_a_vocabulary_says_what_it_saved(
    bert_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _shards_only(bert_data, tmp_path / "data")
    assert _bert_run(data, tmp_path / "out") == 0
    model_dir = tmp_path / "out" / "model"
    assert sorted(p.name for p in model_dir.iterdir()) == ["config.json", "model.safetensors"]
    notes = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("note: ")]
    assert notes == [
        f"note: {model_dir} has no tokenizer: no vocab.txt in {data} and no --tokenizer; "
        "pass --tokenizer with the vocabulary the shards were made with "
        "(AWS's tutorial data: bert-large-uncased's vocab.txt)"
    ]
    assert summary(tmp_path / "out")["tokenizer"] is None


def test_a_vocabulary_larger_than_the_model_is_refused(
    bert_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vocab = tmp_path / "vocab.txt"
    words = (bert_data / "vocab.txt").read_text(encoding="utf-8").splitlines()
    vocab.write_text("\n".join([*words, *(f"x{i}" for i in range(10))]) + "\n", encoding="utf-8")
    assert _bert_run(bert_data, tmp_path / "out", "--tokenizer", str(vocab)) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"error: tokenizer {vocab} has 1034 tokens, the model only 1024"
