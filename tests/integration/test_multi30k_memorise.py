"""The whole pipeline, CLI to CLI, on real data: fetch, train, translate, evaluate.

A small model trained on a 2,000-pair Multi30k slice must reproduce 100 of its training
sentences far better than an untrained one could: a memorisation check that fails when any
stage (tokenizer, batching, masks, loss, optimiser, search, detokenisation) is broken.
"""

import json
import subprocess
import sys
from pathlib import Path

MULTI30K = Path(__file__).resolve().parents[3] / "shared" / "data" / "multi30k"


def tmt(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "transformer_mt", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def test_train_translate_evaluate_memorises_a_slice(tmp_path):
    repo = Path(__file__).resolve().parents[2]
    subprocess.run(
        [sys.executable, "scripts/get_data.py", "multi30k", "--out", str(tmp_path / "full")]
        + ["--from", str(MULTI30K)],
        cwd=repo,
        check=True,
        capture_output=True,
    )
    for split, n in (("train", 2000), ("valid", 100)):
        for lang in ("de", "en"):
            lines = (tmp_path / "full" / f"{split}.{lang}").read_text("utf-8").splitlines()
            (tmp_path / f"{split}.{lang}").write_text("\n".join(lines[:n]) + "\n", "utf-8")
    config = tmp_path / "slice.yaml"
    config.write_text(
        f"""\
model: {{d_model: 128, n_heads: 4, n_layers: 2, d_ff: 256, dropout: 0.0}}
data: {{src_lang: de, tgt_lang: en, train: {tmp_path}/train, valid: {tmp_path}/valid,
        test: null, cache_dir: {tmp_path}/cache}}
tokenizer: {{vocab_size: 2000}}
train: {{max_steps: 300, max_tokens: 4096, lr: 3.0e-3, warmup_steps: 50, valid_every: 300,
         valid_max_sentences: 20, label_smoothing: 0.0, log_every: 50}}
decode: {{beam_size: 2}}
""",
        encoding="utf-8",
    )
    run = tmp_path / "run"
    tmt("train", "--config", str(config), "--run-dir", str(run), cwd=repo)
    source, reference = tmp_path / "mem.de", tmp_path / "mem.en"
    source.write_text("\n".join((tmp_path / "train.de").read_text().splitlines()[:100]) + "\n")
    reference.write_text("\n".join((tmp_path / "train.en").read_text().splitlines()[:100]) + "\n")
    hyp = tmp_path / "mem.hyp"
    tmt("translate", "--checkpoint", str(run / "checkpoints" / "last.pt"), "--input",
        str(source), "--output", str(hyp), cwd=repo)  # fmt: skip
    assert len(hyp.read_text("utf-8").splitlines()) == 100
    scores = json.loads(
        tmt("evaluate", "--hyp", str(hyp), "--ref", str(reference), "--json", cwd=repo).stdout
    )
    bleu = scores[0]["score"]
    # An untrained or broken pipeline scores ~0; this one reached 27.6 after 200 steps and
    # more than 40 after 300 (1 thread, development machine).
    assert bleu > 30, f"BLEU on memorised training sentences is only {bleu:.1f}"
