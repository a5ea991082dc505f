"""An earlier commit's optimized manager, importable beside today's: what ``pagedkv bench
--baseline REV`` measures the current one against, in one process.

``git archive`` copies the commit's ``optimized/`` and ``specs/`` into a package of their own under
a temporary directory, and their imports are renamed into it, so the old code runs its own
validation, accounting and hashing. Only ``pagedkv.specs.types`` and ``pagedkv.specs.errors`` stay
shared: both sides must take the same configurations and return the same ``AllocStatus`` and
errors. That is faithful only if those two files kept every line they had at the commit (lines
added since, such as new types at the end, leave the old code's names as they were; an import
line renamed to the one import name changes no name), which is checked; the bench's replay check
then compares every answer of the old manager with the recording.
"""

from __future__ import annotations

import re
import subprocess
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
SHARED = ("specs/types.py", "specs/errors.py")
FACTORY = "optimized.block_manager:OptimizedBlockSpaceManager"
"""The manager inside the exported package."""


class BaselineError(Exception):
    """The commit cannot be exported (no git, an unknown revision, changed shared types)."""


def _git(*args: str) -> bytes:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPOSITORY), *args], capture_output=True, check=False
        )
    except OSError as error:
        raise BaselineError(f"cannot run git: {error}") from None
    if done.returncode:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        raise BaselineError(f"git {' '.join(args)}: {message[-1] if message else 'failed'}")
    return done.stdout


def package_name(revision: str) -> str:
    return "pagedkv_baseline_" + re.sub(r"\W", "_", revision)


def export(revision: str, directory: Path | None = None) -> tuple[Path, str]:
    """(the directory to put on ``sys.path``, the target spec of the commit's manager)."""
    commit = _git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}").decode().strip()
    changed = _changed_lines(commit)
    if changed:
        raise BaselineError(
            f"{', '.join(changed)} changed since {revision}: the two managers would not share"
            " their value types, so they cannot be compared side by side"
        )
    root = Path(tempfile.mkdtemp(prefix="pagedkv-baseline-")) if directory is None else directory
    package = package_name(revision)
    archive = _git("archive", "--format=tar", commit, "optimized", "specs")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(root / package, filter="data")
    (root / package / "__init__.py").write_text(f'"""pagedkv\'s {revision}, renamed."""\n')
    for source in (root / package).rglob("*.py"):
        source.write_text(_renamed(source.read_text(encoding="utf-8"), package), encoding="utf-8")
    return root, f"{package}.{FACTORY}"


def _changed_lines(commit: str) -> list[str]:
    """The shared files that lost or changed a line since ``commit`` (additions are fine)."""
    changed = []
    for path in SHARED:
        diff = _git("diff", "--unified=0", commit, "--", path).decode(errors="replace")
        added = {_unprefixed(line[1:]) for line in diff.splitlines() if line.startswith("+")}
        removed = [
            line
            for line in diff.splitlines()
            if line.startswith("-") and not line.startswith("---") and line[1:] not in added
        ]
        if removed:
            changed.append(path)
    return changed


def _unprefixed(line: str) -> str:
    """An import line as it was written before the one import name (``from specs.x``)."""
    return re.sub(r"^(\s*from )pagedkv\.((?:optimized|specs)\b)", r"\1\2", line)


def _renamed(text: str, package: str) -> str:
    """``from pagedkv.optimized.x`` and ``from pagedkv.specs.x`` (``from optimized.x`` in commits
    before the one import name) into the package, except the shared modules, which stay
    today's."""
    shared = "|".join(re.escape(Path(p).stem) for p in SHARED)

    def rename(match: re.Match[str]) -> str:
        module = match.group(3)
        if re.fullmatch(rf"specs\.({shared})", module):
            return f"{match.group(1)}pagedkv.{module}"
        return f"{match.group(1)}{package}.{module}"

    pattern = r"^(\s*from )(pagedkv\.)?((?:optimized|specs)(?:\.\w+)*)"
    return re.sub(pattern, rename, text, flags=re.M)
