"""The package's import graph: check the layer rules, and draw it as docs/dev/imports.png.

    python scripts/import_graph.py [--out docs/dev/imports.png] [--check]

Reads every module of transformer_mt/ with `ast` (nothing is imported, so neither torch nor
matplotlib is needed to check), groups the modules by subpackage (model, data, search,
training, inference; each top-level module is a group of its own) and checks `RULES`, the
directions the layers must not be crossed in, `ONLY`, the groups a part may import at all,
and `SEAMS`, the parts of its own group a subpackage must not import.
Prints each import that breaks a rule and exits
with status 1 when there is one. Without `--check` it also draws the groups as boxes, ranked
so that every arrow (importer -> imported) points down, as wide as the module imports it
stands for; imports made only inside function bodies (deferred until first use) are dashed.
The package's own __init__ imports its public names by their strings at first use, which
`ast` does not see as imports.
"""

from __future__ import annotations

import argparse
import ast
import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "transformer_mt"
OUT = REPO / "docs" / "dev" / "imports.png"

# Group -> the groups it must not import: inference and serving never reach into training, the
# checkpoint format (artifacts), its refusals of a bad file (checkpoint_checks) and the inputs a
# command may not write over (input_files) sit below training and inference, search stands
# alone, the CPU kernel table (kernels) sits just above the model, importing a public model or
# exporting ours (interop) reads and writes checkpoints without training, searching or serving,
# documents translate through the Translator, below the server that calls them, and a shortlist
# is made from a checkpoint and a corpus and read by the Translator, below it.
RULES = {
    "checkpoint_checks": ("training", "inference", "search", "cli"),
    "interop": ("training", "search", "serve", "cli"),
    "documents": ("training", "serve", "cli"),
    "distill": ("training", "serve", "cli"),
    "shortlist": ("training", "search", "inference", "serve", "cli"),
    "inference": ("training", "cli"),
    "serve": ("training", "cli"),
    "artifacts": ("training", "inference", "search", "cli"),
    "input_files": ("training", "inference", "search", "cli"),
    "kernels": ("search", "training", "data", "inference", "serve", "artifacts", "cli"),
    "search": ("model", "training", "data", "inference", "artifacts", "cli"),
}

# Group -> the only groups it may import (besides its own modules): the model knows torch and
# its config section, nothing of machines (machine, kernels), files, data, search or serving;
# language identification (langid) wraps lingua, so that evaluation and serving both call it.
ONLY = {
    "model": ("config",),
    "langid": ("errors",),
}


# Subpackage -> the parts of its own group it must not import: the server's HTTP side knows
# the decoding engine only through serve/contract.py (server.py, beside both, runs the app for
# an engine its caller built), and the engine knows nothing of HTTP.
SEAMS = {
    "serve.http": ("serve.engine",),
    "serve.engine": ("serve.http", "serve.server", "serve.http_settings"),
}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted below the package: "training.trainer"
    target: str  # the imported module: "inference.translator"; a package is its __init__
    lazy: bool  # made inside a function body, so only when that function first runs


def read_imports(package: Path = PACKAGE) -> list[Import]:
    """Every import of a module of `package` by a module of `package`, at any depth."""
    found = set()
    for path in sorted(package.rglob("*.py")):
        source = _module_name(path, package)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, lazy in _import_nodes(tree):
            for target in _targets(node, source, package):
                if target != source:
                    found.add(Import(source, target, lazy))
    return sorted(found, key=lambda i: (i.source, i.target, i.lazy))


def group_of(module: str, package: Path = PACKAGE) -> str:
    """The subpackage a module belongs to, or the top-level module itself."""
    head = module.split(".")[0]
    return head if (package / head).is_dir() or module.count(".") == 0 else module


def broken_imports(imports: list[Import], package: Path = PACKAGE) -> list[Import]:
    """The imports that go against `RULES`, `ONLY` or `SEAMS`."""
    return [
        i
        for i in imports
        if _breaks(group_of(i.source, package), group_of(i.target, package))
        or _crosses_seam(i.source, i.target)
    ]


def _breaks(source: str, target: str) -> bool:
    if source == target:
        return False
    if source in ONLY:
        return target not in ONLY[source]
    return target in RULES.get(source, ())


def _crosses_seam(source: str, target: str) -> bool:
    """Whether module `source` imports a part of its group that `SEAMS` keeps it from."""
    return any(
        _inside(source, part) and any(_inside(target, banned) for banned in parts)
        for part, parts in SEAMS.items()
    )


def _inside(module: str, part: str) -> bool:
    """Whether `module` is `part` or one of its modules ("serve.http.app" is in "serve.http")."""
    return module == part or module.startswith(part + ".")


def violations(imports: list[Import], package: Path = PACKAGE) -> list[str]:
    """One line per import against the rules, e.g. `inference.export imports training.run`."""
    return [f"{i.source} imports {i.target}" for i in broken_imports(imports, package)]


def _module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _import_nodes(tree: ast.Module) -> list[tuple[ast.stmt, bool]]:
    """Import statements with whether each sits inside a function."""
    nodes = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                nodes.append((child, in_function))
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            visit(child, inner)

    visit(tree, False)
    return nodes


def _targets(node: ast.stmt, source: str, package: Path) -> list[str]:
    """The package modules an import statement reads (`from a import b`: a.b if that is a
    module, else a)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
        return [m for m in (_within(name, package.name) for name in names) if m is not None]
    base = node.module or ""
    if node.level:  # relative: from the importing module's package upwards
        anchor = source.split(".")[: -node.level] if source != "__init__" else []
        base = ".".join([package.name, *anchor, *filter(None, [base])])
    module = _within(base, package.name)
    if module is None:
        return []
    targets = []
    for alias in node.names:
        child = f"{module}.{alias.name}" if module else alias.name
        exists = (package / child.replace(".", "/")).is_dir() or (
            package / (child.replace(".", "/") + ".py")
        ).exists()
        targets.append(child if exists else module or "__init__")
    return targets


def _within(name: str, package_name: str) -> str | None:
    """`package.a.b` -> `a.b`, the package itself -> "", anything else -> None."""
    if name == package_name:
        return ""
    prefix = package_name + "."
    return name[len(prefix) :] if name.startswith(prefix) else None


# --- the picture ---------------------------------------------------------------------------


PER_COLUMN = 8  # module names listed per column of a box
FOUNDATION = "#9aa5b4"  # arrows into a group that imports no other group
LAYER = "#34495e"  # arrows between the layers above it
BROKEN = "#c0392b"  # arrows that break a rule


def draw(imports: list[Import], out: Path, package: Path = PACKAGE) -> None:
    """Boxes per group (listing its modules), ranked so that imports point down."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    members = _members(package)
    edges = _group_edges(imports, package)
    rows = _rows(list(members), edges)
    places = _places(rows, members)
    broken = broken_imports(imports, package)
    bad = {(group_of(i.source, package), group_of(i.target, package)) for i in broken}
    sinks = set(members) - {source for source, _ in edges}
    width = max(x + w for x, _, w, _ in places.values())
    height = max(y + h for _, y, _, h in places.values())
    fig, ax = plt.subplots(figsize=(width * 0.62, height * 0.62))
    for (source, target), (count, lazy) in sorted(edges.items()):
        color = BROKEN if (source, target) in bad else FOUNDATION if target in sinks else LAYER
        _arrow(ax, places[source], places[target], count, lazy, color)
    for group, place in places.items():
        _box(ax, group, members[group], place)
    _captions(ax, package.name, width)
    ax.set_xlim(-0.3, width + 0.3)
    ax.set_ylim(-1.4, height + 0.3)
    ax.axis("off")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.stem + ".tmp" + out.suffix)
    fig.savefig(tmp, dpi=100, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(out)


def _captions(ax, name: str, width: float) -> None:
    """How to read the picture (above) and the rules it was checked against (below)."""
    ax.set_title(
        f"{name}: every import points down (importer -> imported). Line width: module "
        "imports between the groups; dashed: only inside functions; light: into a group that "
        "imports nothing of the package",
        fontsize=9,
        wrap=True,
    )
    only = [f"{group} imports only {', '.join(allowed)}" for group, allowed in ONLY.items()]
    banned = [f"{group} imports no {', '.join(names)}" for group, names in RULES.items()]
    seams = [f"{part} imports no {', '.join(names)}" for part, names in SEAMS.items()]
    rules = "; ".join(only + banned + seams)
    ax.text(width / 2, -0.8, f"Rules checked: {rules}.", ha="center", fontsize=8, wrap=True)


def _members(package: Path) -> dict[str, list[str]]:
    members: dict[str, list[str]] = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        module = _module_name(path, package)
        members[group_of(module, package)].append(module)
    return dict(members)


def _group_edges(imports: list[Import], package: Path) -> dict[tuple[str, str], tuple[int, bool]]:
    """(importer group, imported group) -> (module imports, whether every one is lazy)."""
    counts: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for i in imports:
        pair = (group_of(i.source, package), group_of(i.target, package))
        if pair[0] != pair[1]:
            counts[pair].append(i)
    return {pair: (len(found), all(i.lazy for i in found)) for pair, found in counts.items()}


def _rows(groups: list[str], edges: dict[tuple[str, str], tuple[int, bool]]) -> list[list[str]]:
    """Groups by rank, top row first: a group ranks one above the highest group it imports
    (a cycle, which the rules do not forbid everywhere, is cut where it closes)."""
    imported = defaultdict(set)
    for source, target in edges:
        imported[source].add(target)
    rank: dict[str, int] = {}

    def rank_of(group: str, path: frozenset[str]) -> int:
        if group not in rank:
            below = [rank_of(t, path | {group}) for t in imported[group] if t not in path]
            rank[group] = 1 + max(below, default=-1)
        return rank[group]

    for group in groups:
        rank_of(group, frozenset())
    rows = [sorted(g for g in groups if rank[g] == r) for r in range(max(rank.values()) + 1)]
    return _untangled([row for row in reversed(rows) if row], imported)


def _untangled(rows: list[list[str]], imported: dict[str, set[str]]) -> list[list[str]]:
    """Each row ordered by the mean position of what its groups import (fewer crossings)."""
    for i in range(len(rows) - 2, -1, -1):
        spot = {g: j / max(len(row) - 1, 1) for row in rows[i + 1 :] for j, g in enumerate(row)}

        def key(group: str, spot: dict[str, float] = spot) -> float:
            spots = [spot[t] for t in imported[group] if t in spot]
            return sum(spots) / len(spots) if spots else 0.5

        rows[i].sort(key=key)
    return rows


def _size(modules: list[str]) -> tuple[float, float]:
    """Width and height of a group's box: its title, then its modules in columns."""
    if len(modules) == 1 and "." not in modules[0]:
        return 2.4, 0.8
    columns = math.ceil(len(modules) / PER_COLUMN)
    return max(2.4, 2.1 * columns + 0.3), 0.9 + 0.36 * min(len(modules), PER_COLUMN)


def _places(rows: list[list[str]], members: dict[str, list[str]]) -> dict[str, tuple]:
    """(x, y, width, height) of every group's box: rows centred, each as tall as its tallest
    box, with room between rows for the arrows."""
    gap_x, gap_y = 0.8, 1.3
    sizes = {g: _size(members[g]) for row in rows for g in row}
    row_widths = [sum(sizes[g][0] for g in row) + gap_x * (len(row) - 1) for row in rows]
    widest = max(row_widths)
    y = sum(max(sizes[g][1] for g in row) for row in rows) + gap_y * (len(rows) - 1)
    places = {}
    for row, row_width in zip(rows, row_widths, strict=True):
        row_height = max(sizes[g][1] for g in row)
        x = (widest - row_width) / 2
        for group in row:
            w, h = sizes[group]
            places[group] = (x, y - h, w, h)
            x += w + gap_x
        y -= row_height + gap_y
    return places


def _box(ax, group: str, modules: list[str], place: tuple) -> None:
    from matplotlib.patches import FancyBboxPatch

    x, y, w, h = place
    package = len(modules) > 1 or "." in modules[0]
    face = "#dbe8f6" if package else "#f1f1f1"
    ax.add_patch(
        FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.04", fc=face, ec="#44546a", lw=1.1)
    )
    title = f"{group}/" if package else f"{group}.py"
    ax.text(x + w / 2, y + h - 0.32, title, ha="center", va="center", weight="bold", fontsize=10)
    for k, module in enumerate(modules if package else []):
        column, line = divmod(k, PER_COLUMN)
        name = module.split(".")[-1] if "." in module else "__init__"
        ax.text(x + 0.2 + 2.1 * column, y + h - 0.78 - 0.36 * line, name, fontsize=8, va="center")


def _arrow(ax, source: tuple, target: tuple, count: int, lazy: bool, color: str) -> None:
    """From the bottom of `source` to the top of `target`, the ends moved along the edges
    towards each other so that arrows to and from one box fan out."""
    from matplotlib.patches import FancyArrowPatch

    (sx, sy, sw, _), (tx, ty, tw, th) = source, target
    s_mid, t_mid = sx + sw / 2, tx + tw / 2
    lean = max(-1.0, min(1.0, (t_mid - s_mid) / 8))
    start = (s_mid + lean * sw * 0.4, sy)
    end = (t_mid - lean * tw * 0.4, ty + th)
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle="-|>",
            mutation_scale=11,
            lw=0.7 + 0.6 * math.log2(count),
            color=color,
            alpha=0.8 if color != FOUNDATION else 0.45,
            linestyle="--" if lazy else "-",
            shrinkA=1,
            shrinkB=1,
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="the PNG to write")
    parser.add_argument("--check", action="store_true", help="check the rules only, draw nothing")
    parser.add_argument("--package", type=Path, default=PACKAGE, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    imports = read_imports(args.package)
    broken = violations(imports, args.package)
    for line in broken:
        print(f"layer rule broken: {line}", file=sys.stderr)
    if not args.check:
        draw(imports, args.out, args.package)
        print(f"wrote {args.out}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
