"""The picture of `tmt serve`'s web page in docs/serving.md: the page translating a paragraph,
then an HTML snippet, the two views stacked into one PNG.

    OMP_NUM_THREADS=1 taskset -c 1 .venv/bin/python scripts/screenshot_page.py \\
        --checkpoint runs/multi30k_multilingual/checkpoints/average_last10.pt \\
        --out docs/serving-page.png

A real server of CHECKPOINT in a thread (serve.server.start_in_thread, the engine's default
limits, the checkpoint's decode settings, beam size 1 as the page has it), its page in
headless Chromium driven as tests/serve/test_browser.py drives it (tests/serve/browser.py:
Debian's chromium and chromium-driver, which `make test-browser` installs). The paragraph is
translated from `--paragraph-source` (default auto: the page shows the language it detected),
the snippet as HTML. Needs Pillow to stack the views (it comes with matplotlib, the dev extra).
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout, uninstalled

from tests.serve.browser import Page, chromium, missing  # noqa: E402
from transformer_mt.serve.engine import Engine  # noqa: E402
from transformer_mt.serve.server import start_in_thread  # noqa: E402

PARAGRAPH = (
    "Ein Mann fährt mit dem Fahrrad über eine Brücke. Zwei Hunde spielen im Schnee. "
    "Eine Frau liest ein Buch im Park."
)
SNIPPET = (
    '<p>A man in a <b>red</b> shirt is riding a <a href="#bike">bike</a>. '
    "Two <i>dogs</i> are playing in the snow.</p>"
)
GAP = 6  # pixels of grey between the two views


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "serving-page.png")
    parser.add_argument("--paragraph", default=PARAGRAPH)
    parser.add_argument("--paragraph-source", default="auto")
    parser.add_argument("--paragraph-target", default="en")
    parser.add_argument("--html", default=SNIPPET)
    parser.add_argument("--html-source", default="en")
    parser.add_argument("--html-target", default="fr")
    args = parser.parse_args()
    if reason := missing():
        sys.exit(f"screenshot_page.py: {reason}")
    base, stop = start_in_thread(Engine.from_checkpoint(args.checkpoint))
    try:
        with chromium() as driver:
            page = Page(driver, base)
            views = []
            for text, source, target, fmt in (
                (args.paragraph, args.paragraph_source, args.paragraph_target, "text"),
                (args.html, args.html_source, args.html_target, "html"),
            ):
                page.choose(source, target, fmt)
                outcome = page.translate(text)
                for shown in page.shown():
                    print(f"{fmt} {source}->{target}: {outcome}: {shown}", file=sys.stderr)
                views.append(driver.get_screenshot_as_png())
    finally:
        stop(drain=False)
    stack(views).save(args.out)
    print(f"wrote {args.out}", file=sys.stderr)


def stack(pngs: list[bytes]):
    """The images of `pngs` one above the other, GAP grey pixels between them."""
    from PIL import Image

    images = [Image.open(io.BytesIO(png)).convert("RGB") for png in pngs]
    width = max(image.width for image in images)
    height = sum(image.height for image in images) + GAP * (len(images) - 1)
    canvas = Image.new("RGB", (width, height), "lightgray")
    top = 0
    for image in images:
        canvas.paste(image, (0, top))
        top += image.height + GAP
    return canvas


if __name__ == "__main__":
    main()
