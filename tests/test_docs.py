"""The user-facing text stays a reference, not a lab notebook.

Development history (work sessions, issue numbers, commit ids, "previously") belongs in the
dated log docs/results.md only; the README stays short and quotes the files it shows as they
are; each config sets only what differs from the defaults, or says why it repeats one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from transformer_mt.config import ExperimentConfig, config_to_dict, load_config

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# Whatever exists under these paths is scanned, so files moved or added later are covered too.
SCANNED = ("transformer_mt", "scripts", "configs", "docs", "README.md", "Makefile")
HISTORY_LOG = ROOT / "docs" / "results.md"
README_MAX_LINES = 260

_WORDS = [
    ("a work session", r"\bsessions?\b"),
    ("an issue number", r"\bissues?\s+#?\d+"),
    ("an issue number", r"(?<![\w&'\"/])#\d+\b"),
    ("'previously'", r"\bpreviously\b"),
    (
        "an earlier state of the code",
        r"\b(?:earlier|older|previous|newer|later)\s+(?:code|commits?|versions?|sessions?)\b",
    ),
    ("'(was ...)'", r"\(was\b"),
    ("'before the change'", r"\bbefore\s+the\s+change\b"),
    ("'new this ...'", r"\bnew\s+this\b"),
    ("a numbered stop", r"\bstop\s+\d+\b"),
]
HISTORY_PATTERNS = [(why, re.compile(pattern, re.IGNORECASE)) for why, pattern in _WORDS]
# Case-sensitive: git prints hashes in lower case; needs a digit and a letter, so plain
# numbers and words are not hashes.
HISTORY_PATTERNS.append(
    ("a commit hash", re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b"))
)


def history_in(text: str) -> list[tuple[int, str, str]]:
    """(line number, reason, line) for every line of `text` that reads like development history."""
    hits = []
    for number, line in enumerate(text.splitlines(), start=1):
        for why, pattern in HISTORY_PATTERNS:
            if pattern.search(line):
                hits.append((number, why, line.strip()))
                break
    return hits


def _text_files() -> list[Path]:
    files = []
    for name in SCANNED:
        path = ROOT / name
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        for file in candidates:
            if not file.is_file() or "__pycache__" in file.parts or file == HISTORY_LOG:
                continue
            try:
                text = file.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue  # images and other binary files
            if "\0" not in text:
                files.append(file)
    return files


@pytest.mark.parametrize(
    "line",
    [
        "measured in a later session",
        "see issue 7's targets",
        "TODO(#7): move to torchao",
        "before the speed work (commit a9ac947)",
        "the code at 2fc1d5e",
        "the loss was previously computed twice",
        "with the older code",
        "4.85 s (was 6.15 s)",
        "measured before the change",
        "BPE-dropout (new this week)",
        "as in stop 12",
    ],
)
def test_history_patterns_catch_history(line):
    assert history_in(line), line


@pytest.mark.parametrize(
    "line",
    [
        "a second signal acts as usual (the previous handlers are back)",
        'f"not valid UTF-8 (byte {data[err.start]:#04x})"',
        "fp32  (4096x512)@(512x8000)         171.6   195.52",
        "input_sentence_size: 2000000",
        "replaces an earlier export, never other files",
        "color = '#1f77b4'",
        "see [Results](#results) and docs/results.md",
    ],
)
def test_history_patterns_pass_reference_text(line):
    assert not history_in(line), line


def test_no_development_history_outside_the_results_log():
    files = _text_files()
    assert any(f.suffix == ".py" for f in files) and README in files  # the scan sees the tree
    found = [
        f"{file.relative_to(ROOT)}:{number}: {why}: {line}"
        for file in files
        for number, why, line in history_in(file.read_text(encoding="utf-8"))
    ]
    assert not found, (
        "development history belongs in docs/results.md (dated, with machine and command):\n"
        + "\n".join(found)
    )


def test_readme_is_short():
    n_lines = len(README.read_text(encoding="utf-8").splitlines())
    assert n_lines <= README_MAX_LINES, f"README.md has {n_lines} lines; keep it to ~250"


def test_readme_config_example_is_the_quickstart_config():
    """The README shows configs/multi30k_de_en.yaml whole, so the two must not drift apart."""
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) == 1, "README.md should hold exactly one yaml block, the config example"
    config_file = ROOT / "configs" / "multi30k_de_en.yaml"
    assert yaml.safe_load(blocks[0]) == yaml.safe_load(config_file.read_text(encoding="utf-8"))


def test_readme_config_table_names_every_key():
    readme = README.read_text(encoding="utf-8")
    missing = []
    for section, values in config_to_dict(ExperimentConfig()).items():
        row = re.search(rf"^\| `{section}` \|(.*)$", readme, re.MULTILINE)
        assert row, f"README.md: no row for the `{section}` section in the config table"
        missing += [f"{section}.{key}" for key in values if f"`{key}`" not in row.group(1)]
    assert not missing, f"README.md config table lacks: {', '.join(missing)}"


def _config_lines(path: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """(section, key) -> (the key's line, its section's line), for block-style YAML."""
    lines, section, header = {}, None, ""
    for line in path.read_text(encoding="utf-8").splitlines():
        top = re.match(r"^(\w+):", line)
        inner = re.match(r"^\s+(\w+):", line)
        if top:
            section, header = top.group(1), line
        elif inner and section:
            lines[(section, inner.group(1))] = (line, header)
    return lines


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_config_repeats_a_default_only_with_a_reason(path):
    """A key set to its default must carry a comment (on its line or its section's line)."""
    defaults = config_to_dict(ExperimentConfig())
    resolved = config_to_dict(load_config(path))
    lines = _config_lines(path)
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    unexplained = []
    for section, values in raw.items():
        for key in values:
            assert (section, key) in lines, f"{path.name}: write {section}.{key} in block style"
            if resolved[section][key] != defaults[section][key]:
                continue
            line, header = lines[(section, key)]
            if "#" not in line and "#" not in header:
                unexplained.append(f"{section}.{key}")
    assert not unexplained, (
        f"{path.name}: {', '.join(unexplained)} equal the defaults in transformer_mt/config/; "
        "remove them, or say on the line why the experiment sets them"
    )


def flags_the_docs_show() -> list[tuple[str, str, str]]:
    """(file:line, subcommand, flag) for every `--flag` after `tmt SUBCOMMAND` in the README
    and the user docs (the log of results quotes commands as they were, and is left out);
    a shell comment after `#` is not part of the command."""
    shown = []
    for doc in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        if doc == HISTORY_LOG:
            continue
        text = re.sub(r"\\\n\s*", " ", doc.read_text(encoding="utf-8"))  # continued lines
        for number, line in enumerate(text.splitlines(), start=1):
            for command in re.finditer(r"\btmt (\w+)([^`|;#\n]*)", line):
                for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", command.group(2)):
                    shown.append((f"{doc.name}:{number}", command.group(1), flag))
    return shown


def test_every_flag_the_docs_show_exists():
    """A renamed or removed flag fails here rather than in a user's shell."""
    from transformer_mt.cli import build_parser

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    flags = {
        name: {o for a in p._actions for o in a.option_strings} for name, p in commands.items()
    }
    shown = flags_the_docs_show()
    assert len(shown) > 100  # the pattern still finds the commands
    unknown = [
        f"{where}: tmt {command} {flag}"
        for where, command, flag in shown
        if command in flags and flag not in flags[command]
    ]
    assert not unknown, unknown
