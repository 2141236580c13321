"""scripts/benchmark.py's own command line: a count below one and a bad checkpoint are one
line each, before any work (they were tracebacks from deep in a benchmark)."""

from __future__ import annotations

import pytest

from tests.benches import import_bench


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--beams", "5", "0"], "error: --beams 0: must be 1 or more"),
        (["--repeats", "0"], "error: --repeats 0: must be 1 or more"),
        (["--threads", "-1"], "error: --threads -1: must be 1 or more"),
    ],
)
def test_a_count_below_one_is_one_line(monkeypatch, capsys, tmp_path, extra, message):
    benchmark = import_bench(monkeypatch, "benchmark")
    with pytest.raises(SystemExit) as stop:
        benchmark.main(["translate", "--checkpoint", str(tmp_path / "x.pt"), *extra])
    assert stop.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(message)


def test_a_checkpoint_that_is_not_one_is_one_line(monkeypatch, capsys, tmp_path):
    benchmark = import_bench(monkeypatch, "benchmark")
    text = tmp_path / "text.pt"
    text.write_text("not a checkpoint\n")
    with pytest.raises(SystemExit) as stop:
        benchmark.main(["compile", "--checkpoint", str(text)])
    assert stop.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"error: {text}: not a readable checkpoint (not a file that torch.save writes)"
