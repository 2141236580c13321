"""Tiny fixtures for training tests: a word-for-word "translation" corpus and a config file."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

# word-for-word "translations": a task a tiny model learns within a few dozen updates
PAIRS = {
    "der": "the", "die": "the", "das": "the", "haus": "house", "katze": "cat", "hund": "dog",
    "mann": "man", "frau": "woman", "kind": "child", "baum": "tree", "auto": "car",
    "rot": "red", "blau": "blue", "gross": "big", "klein": "small", "sieht": "sees",
}  # fmt: skip


def write_corpus(directory: Path, n_train: int = 300, n_valid: int = 20, seed: int = 0) -> None:
    rng = random.Random(seed)
    for name, n in (("train", n_train), ("valid", n_valid)):
        lines = []
        for _ in range(n):
            words = [rng.choice(list(PAIRS)) for _ in range(rng.randint(3, 8))]
            lines.append(" ".join(words) + "\t" + " ".join(PAIRS[w] for w in words))
        (directory / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_config(
    directory: Path, train: str = "", model: str = "dropout: 0.1", tokenizer: str = ""
) -> Path:
    """A tiny experiment (d_model 32, 2 layers, vocab 60) on the corpus of `write_corpus`.

    `train`, `model` and `tokenizer` are YAML flow fragments ("key: value, ...") whose keys
    replace this experiment's own (a config file may not give a key twice). float32 and one
    thread on every machine (`auto` would take bf16 on some CPUs, and as many threads as
    cores are idle when each process starts), so results compare across runs and machines.
    """
    path = directory / "tiny.yaml"
    sections = {
        "model": _merged({"d_model": 32, "n_heads": 4, "n_layers": 2, "d_ff": 64}, model),
        "data": {
            "format": "tsv",
            "train": f"{directory}/train.tsv",
            "valid": f"{directory}/valid.tsv",
            "test": None,
            "cache_dir": f"{directory}/cache",
        },
        "tokenizer": _merged({"vocab_size": 60}, tokenizer),
        "train": _merged(
            {
                "max_steps": 10,
                "max_tokens": 200,
                "lr": 3e-3,
                "warmup_steps": 3,
                "valid_every": 4,
                "log_every": 1,
                "precision": "fp32",
                "threads": 1,
            },
            train,
        ),
        "decode": {"max_len_b": 5},
    }
    path.write_text(yaml.safe_dump(sections, sort_keys=False), encoding="utf-8")
    return path


def _merged(own: dict, fragment: str) -> dict:
    return own | (yaml.safe_load("{" + fragment + "}") or {})


@pytest.fixture
def tiny_experiment(tmp_path: Path) -> Path:
    """Corpus files and tiny.yaml in tmp_path; returns the config path."""
    write_corpus(tmp_path)
    return write_config(tmp_path)


def trained_run(root: Path, seed: int) -> Path:
    """The run directory of a tiny model trained in `root` for 8 updates on a corpus of 120
    pairs drawn with `seed`, validated every 4 updates with BLEU."""
    from transformer_mt.training.run import run_training

    write_corpus(root, n_train=120, seed=seed)
    config = write_config(root, train="max_steps: 8")
    assert run_training(str(config), str(root / "run"), []) == 0
    return root / "run"
