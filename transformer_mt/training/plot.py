"""`tmt plot RUN_DIR`: learning curves from metrics.jsonl to a PNG (matplotlib, no display).

Three panels over the update step: training and validation loss (label-smoothed) with
validation NLL, validation BLEU, and the learning rate.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from transformer_mt.errors import TmtError, shown_value
from transformer_mt.figures import figure_format, pyplot
from transformer_mt.files import atomic_path, check_output
from transformer_mt.run_layout import METRICS_NAME
from transformer_mt.training.metrics import read_metrics

PLOTTED = ("loss", "nll", "bleu", "lr")  # the keys of metrics.jsonl rows drawn below


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Draw the curves of `run_dir/metrics.jsonl` into a figure (default run_dir/curves.png).

    The figure is in the format `out`'s suffix names (png, svg, pdf, ...); its folder is
    created when missing; the file appears only once it is complete.

    Raises:
        TmtError: no metrics file, a metrics file with no point to draw or a bad line, `out`
            would destroy a file (`files.check_output`) or has a suffix no figure format has,
            or matplotlib is not installed.
    """
    run_dir = Path(run_dir)
    metrics = run_dir / METRICS_NAME
    if not metrics.is_file():
        raise TmtError(f"{metrics}: no metrics log (is {run_dir} a run directory?)")
    check_output(out if out is not None else run_dir / "curves.png", [(metrics, "metrics log")])
    out = Path(out) if out is not None else run_dir / "curves.png"
    plt = pyplot("tmt plot")
    chosen = figure_format(out)
    rows = read_metrics(metrics)
    train = [r for r in rows if r["kind"] == "train"]
    valid = [r for r in rows if r["kind"] == "valid"]
    curves = {
        (kind, key): _series(metrics, rs, key)
        for kind, rs in (("train", train), ("valid", valid))
        for key in PLOTTED
    }
    if not any(math.isfinite(v) for _, values in curves.values() for v in values):
        raise TmtError(
            f"{metrics}: no training or validation values yet, nothing to plot (a run writes "
            f"its first record after its first update; {len(rows)} rows, none with a finite "
            f"{', '.join(PLOTTED)})"
        )

    fig, (ax_loss, ax_bleu, ax_lr) = plt.subplots(3, 1, figsize=(7, 9), sharex=True)
    ax_loss.plot(*curves["train", "loss"], label="train loss")
    ax_loss.plot(*curves["valid", "loss"], "o-", label="valid loss")
    ax_loss.plot(*curves["valid", "nll"], "s--", label="valid nll")
    ax_loss.set_ylabel("nats / token")
    ax_loss.legend()
    ax_bleu.plot(*curves["valid", "bleu"], "o-", color="tab:green")
    ax_bleu.set_ylabel("valid BLEU")
    ax_lr.plot(*curves["train", "lr"], color="tab:red")
    ax_lr.set_ylabel("learning rate")
    ax_lr.set_xlabel("update step")
    for ax in (ax_loss, ax_bleu, ax_lr):
        ax.grid(alpha=0.3)
    fig.suptitle(run_dir.name)
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=100, format=chosen)  # the temporary name has no suffix
    plt.close(fig)
    return out


def _series(metrics: Path, rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    """The (steps, values) of `key` in `rows` (one kind), as floats (NaN: a gap in the curve).

    Raises:
        TmtError: a value that is no number, or one no float holds (a 400-digit integer),
            naming the row.
    """
    steps, values = [], []
    for row in rows:
        value = row.get(key)
        if value is None:
            continue
        try:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError
            number = float(value)
        except (TypeError, OverflowError):
            raise TmtError(
                f"{metrics}: the {row['kind']} row of step {row['step']} has {key} "
                f"{shown_value(json.dumps(value))}, not a number"
            ) from None
        steps.append(row["step"])
        values.append(number)
    return steps, values
