"""The web page in headless Chromium, as a person uses it: two sentences typed into the page
and translated show what POST /v1/translate returns for them, and the metrics panel fills
from /metrics. Real server, real engine, Debian's chromium and chromium-driver driven by
selenium over WebDriver (the driver ships with the browser, so their versions match; nothing
is downloaded). Skipped where any of them is absent: `make test-browser` installs them.

`--screenshot PNG` also saves the page after translating (docs/serving-page.png).
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from transformer_mt.serve.engine import Engine, ServeLimits  # noqa: E402
from transformer_mt.serve.server import start_in_thread  # noqa: E402

# Without selenium or the browser the `browser` fixture skips the test: a module skipped as a
# whole would leave pytest with no test run (exit status 5), which `make test-browser` runs alone.
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:
    webdriver = None

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
KV_BLOCKS = 500
# Words the tiny test tokenizer knows (tests/conftest.py WORDS).
SENTENCES = ["ein mann fährt rad", "zwei hunde spielen im schnee"]
VIEWPORT = {"width": 1000, "height": 700, "deviceScaleFactor": 1, "mobile": False}
WAIT_SECONDS = 15  # a translation by the tiny model takes milliseconds; a metrics poll 2 s
PANEL = {
    "m-queue": r"\d+ sentences",
    "m-running": r"\d+ sentences, \d+ hypotheses",
    "m-kv": rf"\d+ / {KV_BLOCKS}",
    "m-speed": r"\d+\.\d",
    "m-cache": r"\w+: \d+(, \w+: \d+)*",
}


@pytest.fixture(scope="module")
def url(checkpoint):
    engine = Engine.from_checkpoint(str(checkpoint), limits=ServeLimits(kv_blocks=KV_BLOCKS))
    base, stop = start_in_thread(engine)
    yield base
    stop(drain=False)


@pytest.fixture(scope="module")
def browser():
    if webdriver is None:
        pytest.skip("needs selenium (pip install -e '.[dev]')")
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip(
            f"needs Debian's chromium and chromium-driver ({CHROMIUM}, {CHROMEDRIVER}); "
            "`make test-browser` installs them"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    # As root (CI) Chromium runs only without its sandbox; containers have a small /dev/shm.
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", VIEWPORT)
        yield driver
    finally:
        driver.quit()


def api_translations(url: str, body: dict) -> list[dict]:
    request = urllib.request.Request(
        f"{url}/v1/translate", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["translations"]


def text(browser, element_id: str) -> str:
    return browser.find_element(By.ID, element_id).text


def shown_translations(browser) -> list[tuple[str, float]]:
    """(text, score) of each item of the page's result list."""
    shown = []
    for item in browser.find_elements(By.CSS_SELECTOR, "#result li"):
        score = item.find_element(By.CLASS_NAME, "score").text
        shown.append((item.text.removesuffix(score).rstrip(), float(score.strip("()"))))
    return shown


def test_page_translates_as_the_api_does_and_shows_metrics(browser, url, request):
    browser.get(f"{url}/")
    wait = WebDriverWait(browser, WAIT_SECONDS)
    browser.find_element(By.ID, "source").send_keys("\n".join(SENTENCES))
    beam_size = int(browser.find_element(By.ID, "beam").get_attribute("value"))
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda _: text(browser, "timing") not in ("", "translating..."))
    assert re.fullmatch(r"\d+ ms", text(browser, "timing"))  # else the error it shows

    expected = api_translations(url, {"text": SENTENCES, "beam_size": beam_size})
    shown = shown_translations(browser)
    assert [text for text, _ in shown] == [t["text"] for t in expected]
    assert [score for _, score in shown] == pytest.approx([t["score"] for t in expected], abs=1e-3)
    assert browser.find_element(By.ID, "translate").is_enabled()

    # A poll after the translation: the tokens it generated in the last seconds are counted.
    wait.until(lambda _: text(browser, "m-speed") != "-" and float(text(browser, "m-speed")) > 0)
    for element, pattern in PANEL.items():
        assert re.fullmatch(pattern, text(browser, element)), element
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []
    if path := request.config.getoption("--screenshot"):
        browser.save_screenshot(path)
