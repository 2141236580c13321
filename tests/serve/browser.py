"""The web page of `tmt serve` in headless Chromium, driven as a person uses it: what
tests/serve/test_browser.py and scripts/screenshot_page.py share.

Debian's chromium and chromium-driver, driven by selenium over WebDriver (the driver ships
with the browser, so their versions match; nothing is downloaded); `make test-browser`
installs them. `missing()` says what is absent, for a test to skip.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:
    webdriver = None

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
VIEWPORT = {"width": 1000, "height": 700, "deviceScaleFactor": 1, "mobile": False}
# A translation by the tiny test model takes milliseconds, by a Multi30k model on a busy CPU
# a few seconds; a metrics poll comes every 2 s.
WAIT_SECONDS = 60


def missing() -> str | None:
    """Why the browser cannot run here, None when it can."""
    if webdriver is None:
        return "needs selenium (pip install -e '.[dev]')"
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        return (
            f"needs Debian's chromium and chromium-driver ({CHROMIUM}, {CHROMEDRIVER}); "
            "`make test-browser` installs them"
        )
    return None


@contextlib.contextmanager
def chromium(viewport: dict = VIEWPORT) -> Iterator[webdriver.Chrome]:
    """Headless Chromium showing `viewport`, quit on leaving."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    # As root (CI) Chromium runs only without its sandbox; containers have a small /dev/shm.
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", viewport)
        yield driver
    finally:
        driver.quit()


@dataclass(frozen=True)
class Shown:
    """One item of the page's result list: the translation, its score and the detected
    language (None where the page shows none)."""

    text: str
    score: float | None
    detected: str | None


class Page:
    """The page at `url` in `driver`."""

    def __init__(self, driver: webdriver.Chrome, url: str):
        self.driver = driver
        self.wait = WebDriverWait(driver, WAIT_SECONDS)
        driver.get(f"{url}/")
        self.wait.until(lambda _: self.element("languages").get_attribute("data-loaded"))

    def element(self, element_id: str):
        return self.driver.find_element(By.ID, element_id)

    def text(self, element_id: str) -> str:
        return self.element(element_id).text

    def options(self, element_id: str) -> list[tuple[str, str]]:
        """(value, label) of each option of a selector."""
        return [
            (option.get_attribute("value"), option.text)
            for option in Select(self.element(element_id)).options
        ]

    def choose(self, source: str | None = None, target: str | None = None, fmt: str = "text"):
        """Select the languages (None: leave as they are) and the format."""
        for element_id, value in (("src-lang", source), ("tgt-lang", target), ("format", fmt)):
            if value is not None:
                Select(self.element(element_id)).select_by_value(value)

    def translate(self, text: str, key: str | None = None) -> str:
        """Type `text` (and `key`), press Translate, and wait for the outcome: the timing
        line, "N ms" or the error the page shows."""
        for element_id, value in (("source", text), ("api-key", key or "")):
            self.element(element_id).clear()
            self.element(element_id).send_keys(value)
        self.element("translate").click()
        self.wait.until(lambda _: self.element("translate").is_enabled())
        return self.text("timing")

    def shown(self) -> list[Shown]:
        """The items of the result list."""
        return [_shown(item) for item in self.driver.find_elements(By.CSS_SELECTOR, "#result li")]

    def severe_errors(self) -> list[dict]:
        """The browser console's errors since the last call."""
        return [entry for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE"]


def drawn_text(driver: webdriver.Chrome, address: str, selector: str) -> str:
    """The text of the page at `address` once its scripts have drawn an element matching the
    CSS `selector` (a page drawn by scripts: the API pages at /docs and /redoc)."""
    driver.get(address)
    WebDriverWait(driver, WAIT_SECONDS).until(lambda d: d.find_elements(By.CSS_SELECTOR, selector))
    return driver.find_element(By.TAG_NAME, "body").text


def _shown(item) -> Shown:
    def part(name: str) -> str | None:
        found = item.find_elements(By.CLASS_NAME, name)
        return found[0].get_attribute("textContent") if found else None

    score = part("score")
    detected = item.find_elements(By.CLASS_NAME, "detected")
    return Shown(
        part("text"),
        float(score.strip(" ()")) if score else None,
        detected[0].get_attribute("data-language") if detected else None,
    )
