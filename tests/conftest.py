"""Shared test settings: seeded, CPU, float32, one torch thread; `slow` tests run only with
--runslow; kernel choices timed once for the whole session (in a folder of its own, never the
user's)."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from transformer_mt.artifacts import load_for_inference
from transformer_mt.config import (
    DataConfig,
    ExperimentConfig,
    ModelConfig,
    TokenizerConfig,
    TrainSource,
    config_to_dict,
)
from transformer_mt.data.specials import own_specials
from transformer_mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transformer_mt.data.tokenizer_training import train_tokenizers
from transformer_mt.model import build_model


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="run tests marked slow")


def pytest_configure(config):
    """Kernel choices (`timed_choices`) kept in a session folder, also for the CLI run in
    subprocesses: every model of one kind then runs the same kernels in every test, however
    busy the machine is while one of them loads."""
    config.kernel_cache = tempfile.mkdtemp(prefix="tmt-kernel-choices-")
    os.environ["TMT_CACHE_DIR"] = config.kernel_cache
    # One torch thread for every command a test runs, in this process and in subprocesses:
    # chosen automatically, the count (and a note on stderr) would follow the machine's load.
    # Tests of that choice set or delete the variable themselves.
    os.environ["OMP_NUM_THREADS"] = "1"


def pytest_unconfigure(config):
    shutil.rmtree(getattr(config, "kernel_cache", ""), ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed_and_threads():
    """Every test starts seeded, with the torch threads the session started with: an
    in-process `tmt train` sets them for the whole process (train.threads)."""
    threads = torch.get_num_threads()
    torch.manual_seed(0)
    yield
    torch.set_num_threads(threads)


WORDS = [
    "ein",
    "mann",
    "fährt",
    "rad",
    "zwei",
    "hunde",
    "spielen",
    "im",
    "schnee",
    "eine",
    "frau",
    "liest",
    "das",
    "buch",
]


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    """An untrained tiny model with a real tokenizer, saved as a checkpoint file."""
    return save_tiny_checkpoint(tmp_path_factory.mktemp("ckpt"))


# The directions of `multilingual_checkpoint`, de->en first (its default): three languages,
# so de->fr and fr->de are zero-shot.
MULTILINGUAL = (("de", "en"), ("en", "de"), ("fr", "en"), ("en", "fr"))


@pytest.fixture(scope="session")
def multilingual_checkpoint(tmp_path_factory):
    """`checkpoint`'s model with the `>>xx<<` tags of three languages, in MULTILINGUAL."""
    return save_tiny_checkpoint(tmp_path_factory.mktemp("multi"), MULTILINGUAL)


def save_tiny_checkpoint(
    directory: Path, directions: tuple[tuple[str, str], ...] = (), **model_options
) -> Path:
    """`checkpoint`'s model (with `model_options` changed) saved as directory/model.pt.

    `directions`: (source, target) pairs the model was "trained" on, each training source of
    its config (the first: data.src_lang, data.tgt_lang); their languages get `>>xx<<` tags,
    as `tmt train` gives a multilingual model (tests/training/test_language_tags.py).
    """
    texts = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))] * 3
    codes = tuple(dict.fromkeys(code for pair in directions for code in pair))
    tokenizer_cfg = TokenizerConfig(vocab_size=60, language_tags=codes)
    tokenizers = train_tokenizers(tokenizer_cfg, texts, texts, directory)
    sizes = dict(d_model=16, n_heads=2, n_layers=1, d_ff=32, max_positions=64)
    model_cfg = ModelConfig(**{**sizes, **model_options})
    data = DataConfig()
    if directions:
        sources = tuple(TrainSource("train", src_lang=s, tgt_lang=t) for s, t in directions)
        data = DataConfig(src_lang=directions[0][0], tgt_lang=directions[0][1], train=sources)
    config = ExperimentConfig(model=model_cfg, data=data, tokenizer=tokenizer_cfg)
    torch.manual_seed(0)
    model = build_model(model_cfg, tokenizers.src.vocab_size, pad_id=PAD_ID)
    state = {
        "model": model.state_dict(),
        "config": config_to_dict(config),
        "tokenizers": {"src": tokenizers.src.model_bytes, "tgt": tokenizers.tgt.model_bytes},
        "step": 0,
    }
    if codes:
        state["specials"] = own_specials(tokenizers.src, codes).to_dict()
    path = directory / "model.pt"
    torch.save(state, path)
    return path


def teacher_forced_log_probs(model: torch.nn.Module) -> torch.Tensor:
    """`checkpoint`'s kind of model's log-probabilities of two fixed sentence pairs (one
    padded), teacher-forced: how a quantised twin is compared with the float32 model."""
    src_ids = torch.tensor([[5, 9, 12, EOS_ID], [7, 8, EOS_ID, PAD_ID]])
    tgt_ids = torch.tensor([[BOS_ID, 5, 9, 12, 20], [BOS_ID, 7, 8, 30, 4]])
    with torch.no_grad():
        return torch.log_softmax(model(src_ids, tgt_ids), -1)


def fit_tiny_checkpoint(
    path: Path, pairs: list[tuple[list[int], list[int]]], lr: float, steps: int, out: Path
) -> Path:
    """The checkpoint at `path` after `steps` full-batch Adam steps on `pairs` (source ids,
    target ids, without specials), saved as `out`: a few seconds that make a tiny model write
    several words and end its hypotheses in EOS at different lengths."""
    state = torch.load(path, weights_only=True)
    model = load_for_inference(path).model
    src = pad_rows([[*s, EOS_ID] for s, _ in pairs])
    tgt_in, tgt_out = (
        pad_rows([[BOS_ID, *t] for _, t in pairs]),
        pad_rows([[*t, EOS_ID] for _, t in pairs]),
    )
    torch.manual_seed(0)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        logits = model(src, tgt_in)
        loss = torch.nn.functional.cross_entropy(
            logits.transpose(1, 2), tgt_out, ignore_index=PAD_ID
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    state["model"] = model.state_dict()
    torch.save(state, out)
    return out


def pad_rows(rows: list[list[int]]) -> torch.Tensor:
    """(B, L) long: `rows` right-padded with PAD_ID."""
    width = max(map(len, rows))
    return torch.tensor([row + [PAD_ID] * (width - len(row)) for row in rows])


def make_run_dir(root: Path) -> Path:
    """root/run laid out as `tmt train` leaves a run (run_layout.py), with stand-in contents:
    a config, one metrics row, a tokenizer file and checkpoints/best.pt."""
    run = root / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("model: {}\n")
    (run / "metrics.jsonl").write_text('{"kind": "train", "step": 1, "loss": 5.0, "lr": 1e-4}\n')
    (run / "spm-src-ab12.model").write_bytes(b"a tokenizer")
    (run / "checkpoints" / "best.pt").write_bytes(b"the best weights")
    return run


def without_notes(err: str) -> str:
    """stderr without the `note:` lines a busy machine adds (the threads left to a command), so
    that a test of an error message passes on a loaded machine as on a quiet one."""
    return "".join(line for line in err.splitlines(True) if not line.startswith("note: "))


@pytest.fixture(scope="session")
def japanese_tokenizer(tmp_path_factory):
    """A small SentencePiece model of Japanese text, written without spaces, with byte
    fallback (so that a rare character is UTF-8 byte pieces)."""
    import sentencepiece as spm

    from transformer_mt.data.tokenizer import Tokenizer

    folder = tmp_path_factory.mktemp("ja")
    lines = ["私は学生です。", "彼は東京の医者です。", "猫が庭で寝ています。", "これはペンです。"]
    (folder / "ja.txt").write_text("\n".join(lines * 50) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(folder / "ja.txt"), model_prefix=str(folder / "ja"), vocab_size=300,
        character_coverage=1.0, byte_fallback=True, model_type="bpe",
        pad_id=0, unk_id=1, bos_id=2, eos_id=3,
    )  # fmt: skip
    return Tokenizer.load(folder / "ja.model")
