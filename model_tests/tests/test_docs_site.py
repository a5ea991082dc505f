"""The docs site (``mkdocs.yml``, ``make docs``): README.md, ``specs/`` and the API reference,
built as ``make docs`` builds it, in strict mode, so that a broken link or anchor in any page fails
the suite. The API page must document every public name of ``import pagedkv``, and the README's
images must be absolute for the package page yet local on the site. A copy of the docs with a
broken link, a broken anchor and a link into the code outside ``specs/`` planted must fail the
build, on exactly those three.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import pagedkv

ROOT = Path(__file__).resolve().parents[2]
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)")
PLANTED = {
    "nowhere.md": "[a page that does not exist](nowhere.md)",
    "#no-such-section": "[a section that does not exist](invariants.md#no-such-section)",
    "../reference/block_pool.py": "[code outside specs/](../reference/block_pool.py)",
}
"""What the planted copy adds to specs/block_pool.md, by the target strict mode must name."""


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        # material's banner about its end of life; the build's findings are what is read here
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )


def warnings(built: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in built.stderr.splitlines() if line.startswith("WARNING")]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    built = build(ROOT / "mkdocs.yml", site)
    assert built.returncode == 0, built.stderr
    assert warnings(built) == []
    return site


def test_the_site_builds_strict_with_every_page(site: Path) -> None:
    pages = sorted(page.stem for page in (ROOT / "specs").glob("*.md") if page.stem != "README")
    for page in pages:
        assert (site / "specs" / page / "index.html").is_file(), page
    assert (site / "specs" / "index.html").is_file()  # specs/README.md
    assert (site / "specs" / "verdict.schema.json").is_file()


def test_the_api_page_documents_every_public_name(site: Path) -> None:
    page = (site / "api" / "index.html").read_text()
    missing = [name for name in pagedkv.__all__ if f'id="pagedkv.{name}"' not in page]
    assert missing == []


def test_the_readme_images_are_absolute_for_the_package_page_and_local_on_the_site(
    site: Path,
) -> None:
    source = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Source"]
    raw = source.replace("https://github.com/", "https://raw.githubusercontent.com/") + "/main/"
    images = IMAGE.findall((ROOT / "README.md").read_text())
    assert images
    for image in images:
        assert image.startswith(raw), image
        assert (ROOT / image.removeprefix(raw)).is_file(), image
    shown = re.findall(r'<img [^>]*src="([^"]+)"', (site / "index.html").read_text())
    assert shown == [image.removeprefix(raw) for image in images]


def test_a_planted_broken_link_or_anchor_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("__pycache__"))
    (docs / "api.md").write_text("# API reference\n")  # not under test here, and slow to build
    pool_page = docs / "specs" / "block_pool.md"
    pool_page.write_text(pool_page.read_text() + "\n" + "\n".join(PLANTED.values()) + "\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: {docs}\n")
    built = build(config, tmp_path / "site")
    assert built.returncode != 0
    found = warnings(built)
    assert len(found) == len(PLANTED), found
    for target in PLANTED:
        naming = [line for line in found if "'specs/block_pool.md'" in line and target in line]
        assert len(naming) == 1, (target, found)
