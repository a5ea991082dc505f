"""The trace viewer's page in a real browser: headless Chromium opens the page of a divergence,
a person's clicks step through it to the diverging step, and a screenshot is saved.

Driven with Selenium through ChromeDriver (Debian's ``chromium`` and ``chromium-driver``, the
same build, so the driver always matches the browser; ``make setup`` installs both where it is
root with apt-get). Set ``PAGEDKV_SCREENSHOT=path.png`` to keep the screenshot (the README's
``specs/img/divergence.png`` is made so). The test is skipped on a machine without them, and
fails under ``CI=true``: CI must run it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pagedkv.model_tests.independent import broken
from pagedkv.model_tests.teaching import demo, page
from pagedkv.model_tests.teaching.walkthrough import walk_trace
from pagedkv.model_tests.tests.request_oracle_targets import HERE, head_first
from pagedkv.model_tests.tests.teaching_pages import SWAP_TARGET, request_order_trace, swap_trace

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",  # without these it floods the closed network
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--window-size=1400,1000",
)

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    HAVE_SELENIUM = True
except ImportError:  # pragma: no cover - selenium is a dev dependency
    HAVE_SELENIUM = False


def _missing() -> str | None:
    if not HAVE_SELENIUM:
        return "selenium is not installed (pip install -e '.[dev]')"
    if CHROMIUM is None or CHROMEDRIVER is None:
        return (
            "Chromium and ChromeDriver are not installed (apt-get install chromium chromium-driver)"
        )
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    missing = _missing()
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the browser test, but {missing}: make setup installs them")
        pytest.skip(missing)
    assert CHROMIUM is not None and CHROMEDRIVER is not None
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SE_OFFLINE", "true")  # Selenium Manager: never download anything
        driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def shown(driver: Any) -> list[str]:
    """The data-step of every step section a person can see."""
    sections = driver.find_elements(By.CSS_SELECTOR, "section.step")
    return [s.get_attribute("data-step") for s in sections if s.is_displayed()]


def test_clicking_next_steps_through_a_divergence_to_the_marked_step(
    browser: Any, tmp_path: Path
) -> None:
    loaded = swap_trace()
    walk = walk_trace(loaded, "pagedkv-divergence.jsonl", broken.BrokenSwapDropsPair, SWAP_TARGET)
    path = page.write(walk, tmp_path / "pagedkv-divergence.html")
    browser.get(path.as_uri() + "#step-0")  # a divergence's page opens at it: start from 0

    last = len(loaded.ops)
    position = browser.find_element(By.ID, "position")
    assert shown(browser) == ["0"] and position.text == f"step 0 of {last}"
    assert not browser.find_element(By.ID, "prev").is_enabled()
    for step in range(1, last + 1):
        browser.find_element(By.ID, "next").click()
        assert shown(browser) == [str(step)]
        assert position.text == f"step {step} of {last}"
        current = browser.find_element(By.CSS_SELECTOR, "section.step.current")
        assert current.find_element(By.CSS_SELECTOR, "h2").text.startswith(f"step {step} of")
    assert not browser.find_element(By.ID, "next").is_enabled()

    marked = browser.find_element(By.CSS_SELECTOR, "section.step.current")
    assert "diverges" in (marked.get_attribute("class") or "")
    finding = marked.find_element(By.CSS_SELECTOR, ".finding")
    assert finding.is_displayed()
    assert "swap mappings list exactly the copies" in finding.text
    assert "the target []" in finding.text
    theirs = marked.find_element(By.CSS_SELECTOR, ".side.target .outcome")
    assert theirs.text == "returns []" and "differs" in (theirs.get_attribute("class") or "")
    screenshot = tmp_path / "divergence.png"
    assert browser.save_screenshot(str(screenshot))
    data = screenshot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    keep = os.environ.get("PAGEDKV_SCREENSHOT")
    if keep:
        Path(keep).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(screenshot, keep)

    # the keys and the index move too, and the warning button comes back to the divergence
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ARROW_LEFT)
    assert shown(browser) == [str(last - 1)]
    browser.find_element(By.ID, "first").click()
    assert shown(browser) == ["0"]
    browser.find_element(By.CSS_SELECTOR, '.index a[data-step="4"]').click()
    assert shown(browser) == ["4"]
    browser.find_element(By.ID, "to-finding").click()
    assert shown(browser) == [str(last)]


def test_a_divergence_page_opens_at_the_divergence(browser: Any, tmp_path: Path) -> None:
    """What ``pagedkv show`` and ``pagedkv check`` write: the reader starts where it failed."""
    loaded = swap_trace()
    walk = walk_trace(loaded, "pagedkv-divergence.jsonl", broken.BrokenSwapDropsPair, SWAP_TARGET)
    path = page.write(walk, tmp_path / "pagedkv-divergence.html")
    browser.get(path.as_uri())
    last = len(loaded.ops)
    assert shown(browser) == [str(last)]
    assert browser.find_element(By.ID, "position").text == f"step {last} of {last}"
    marked = browser.find_element(By.CSS_SELECTOR, "section.step.current")
    assert marked.find_element(By.CSS_SELECTOR, ".finding").is_displayed()
    assert browser.execute_script("return window.scrollY") == 0  # the header stays in view
    browser.get("about:blank")  # (a new fragment alone would not load the page again)
    browser.get(path.as_uri() + "#step-1")  # an address naming a step still wins
    assert shown(browser) == ["1"]


def test_the_demo_page_opens_at_the_step_its_address_names(browser: Any, tmp_path: Path) -> None:
    path = page.write(demo.walk(), tmp_path / "demo.html")
    browser.get(path.as_uri() + "#step-7")
    assert shown(browser) == ["7"]
    current = browser.find_element(By.CSS_SELECTOR, "section.step.current")
    assert "copies for the kernel: 3 → 5" in current.text
    assert browser.execute_script("return window.scrollY") == 0  # the header stays in view


def test_a_request_level_divergence_opens_and_steps_to_its_mark(
    browser: Any, tmp_path: Path
) -> None:
    """A request-level trace (another free order than vLLM v1's, which evicts the wrong cached
    block two calls later) drawn with its target: the tables per request and group, the pool,
    and the marked step. ``PAGEDKV_SCREENSHOT_REQUEST=path.png`` keeps the screenshot."""
    loaded = request_order_trace()
    walk = walk_trace(loaded, "request.jsonl", head_first, f"{HERE}:head_first")
    path = page.write(walk, tmp_path / "request.html")
    browser.get(path.as_uri() + "#step-0")
    last = len(loaded.ops)
    for step in range(1, last + 1):
        browser.find_element(By.ID, "next").click()
        assert shown(browser) == [str(step)]
    marked = browser.find_element(By.CSS_SELECTOR, "section.step.current")
    assert "diverges" in (marked.get_attribute("class") or "")
    finding = marked.find_element(By.CSS_SELECTOR, ".finding")
    assert "evicted its cached block 2" in finding.text
    assert "request 'b' group 0" in marked.text
    screenshot = tmp_path / "request-divergence.png"
    assert browser.save_screenshot(str(screenshot))
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    keep = os.environ.get("PAGEDKV_SCREENSHOT_REQUEST")
    if keep:
        Path(keep).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(screenshot, keep)
