"""`tmt plot`: a PNG for a run's metrics, its folder created; nothing to plot is an error."""

import json

import pytest

from transformer_mt.cli import main

pytest.importorskip("matplotlib")

ROWS = [
    {"kind": "train", "step": 1, "loss": 5.0, "lr": 1e-4},
    {"kind": "train", "step": 2, "loss": 4.5, "lr": 2e-4},
    {"kind": "valid", "step": 2, "loss": 4.4, "nll": 4.0, "bleu": 1.5},
]


def run_dir_with(tmp_path, rows):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    text = "".join(json.dumps(row) + "\n" for row in rows)
    (run_dir / "metrics.jsonl").write_text(text, encoding="utf-8")
    return run_dir


def test_plot_creates_the_missing_output_folder(tmp_path, capsys):
    run_dir = run_dir_with(tmp_path, ROWS)
    out = tmp_path / "figures" / "new" / "curves.png"
    assert main(["plot", str(run_dir), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in out.parent.iterdir()] == ["curves.png"]  # no temporary file left
    assert capsys.readouterr().out.strip() == str(out)


@pytest.mark.parametrize(
    "rows",
    [
        [],
        [{"kind": "train", "step": 0}],
        [{"kind": "bogus", "step": 5, "loss": 3.0}],  # a kind no curve is drawn of
        [{"kind": "train", "step": 1, "loss": float("nan"), "lr": float("inf")}],
    ],
    ids=["empty", "no-values", "unknown-kind", "not-finite"],
)
def test_nothing_to_plot_is_an_error_naming_the_file(tmp_path, capsys, rows):
    run_dir = run_dir_with(tmp_path, rows)
    old = run_dir / "curves.png"
    old.write_bytes(b"an earlier plot")
    assert main(["plot", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {run_dir / 'metrics.jsonl'}: no training or validation values yet, "
        "nothing to plot (a run writes its first record after its first update; "
        f"{len(rows)} rows, none with a finite loss, nll, bleu, lr)\n"
    )
    assert old.read_bytes() == b"an earlier plot"


def test_a_value_no_float_holds_is_named(tmp_path, capsys):
    run_dir = run_dir_with(tmp_path, ROWS)
    with open(run_dir / "metrics.jsonl", "a", encoding="utf-8") as log:
        log.write('{"kind": "train", "step": 3, "loss": 1' + "0" * 400 + "}\n")
    assert main(["plot", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {run_dir / 'metrics.jsonl'}: the train row of step 3 has loss ")
    assert err.endswith(", not a number\n") and err.count("\n") == 1


@pytest.mark.parametrize("step", [True, 2.5, -1, 10**26])
def test_a_row_whose_step_is_no_update_count_is_named(tmp_path, capsys, step):
    """Even the last row: only a line cut short (not JSON) is taken for a crash's."""
    run_dir = run_dir_with(tmp_path, [*ROWS, {"kind": "valid", "step": step, "loss": 1.0}])
    assert main(["plot", str(run_dir)]) == 2
    assert capsys.readouterr().err == (
        f"error: {run_dir / 'metrics.jsonl'}:4: not a metrics row (a JSON object with kind and "
        "step)\n"
    )


def test_a_line_nested_too_deeply_for_json_is_named(tmp_path, capsys):
    run_dir = run_dir_with(tmp_path, ROWS)
    text = (run_dir / "metrics.jsonl").read_text(encoding="utf-8")
    deep = "[" * 100_000 + "]" * 100_000
    (run_dir / "metrics.jsonl").write_text(f"{deep}\n{text}", encoding="utf-8")
    assert main(["plot", str(run_dir)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {run_dir / 'metrics.jsonl'}:1: not a ")


def test_a_last_line_cut_short_is_left_out(tmp_path, capsys):
    run_dir = run_dir_with(tmp_path, ROWS)
    with open(run_dir / "metrics.jsonl", "a", encoding="utf-8") as log:
        log.write('{"kind": "train", "st')
    assert main(["plot", str(run_dir)]) == 0


@pytest.mark.parametrize("name, start", [("curves.svg", b"<?xml"), ("curves.pdf", b"%PDF")])
def test_the_figure_is_in_the_format_its_name_says(tmp_path, name, start):
    run_dir = run_dir_with(tmp_path, ROWS)
    out = tmp_path / name
    assert main(["plot", str(run_dir), "--out", str(out)]) == 0
    assert out.read_bytes().startswith(start)


def test_a_suffix_of_no_figure_format_is_refused_before_drawing(tmp_path, capsys):
    run_dir = run_dir_with(tmp_path, ROWS)
    out = tmp_path / "curves.docx"
    assert main(["plot", str(run_dir), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {out}: .docx is no figure format; name one of ")
    assert "pdf, " in err and not out.exists()


def test_pgf_without_tex_is_refused_before_drawing(tmp_path, capsys, monkeypatch):
    """matplotlib writes .pgf by running TeX on every label; without it, one line."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no xelatex on it
    run_dir = run_dir_with(tmp_path, ROWS)
    out = tmp_path / "sub" / "curves.pgf"
    assert main(["plot", str(run_dir), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"error: {out}: the pgf format needs xelatex (a TeX installation), which is not on "
        "PATH; name another format, e.g. .pdf or .svg\n"
    )
    assert not out.parent.exists()


def test_an_output_name_ending_in_a_slash_is_a_folder(tmp_path, capsys):
    run_dir = run_dir_with(tmp_path, ROWS)
    out = f"{tmp_path / 'figures'}/"
    assert main(["plot", str(run_dir), "--out", out]) == 2
    assert capsys.readouterr().err == (
        f"error: {out}: names a directory, not a file; give a file name to write\n"
    )
    assert not (tmp_path / "figures").exists()
