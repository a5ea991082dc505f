"""Where a command's machine-readable verdict goes (``--json FILE``, ``--junit-xml FILE``).

Both paths are tried before anything runs (``trace.check_writable``), and a file already there
is removed then: a run that ends without a verdict (an error of use, a crash, Ctrl-C) leaves no
file, never an earlier run's ``pass``. Each file is written whole once the verdict is printed, to
a temporary name beside it and renamed, so that a reader never sees half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pagedkv.model_tests.oracle import trace
from pagedkv.model_tests.oracle.junit import junit_xml


class VerdictFiles:
    """The ``--json`` and ``--junit-xml`` files of one command (either may be None)."""

    def __init__(self, json_path: str | None, junit_path: str | None) -> None:
        self.json = None if json_path is None else self._claimed(json_path)
        self.junit = None if junit_path is None else self._claimed(junit_path)
        if self.json is not None and self.json == self.junit:
            raise trace.TraceError(f"--json and --junit-xml name the same file: {json_path}")

    @property
    def wanted(self) -> bool:
        return self.json is not None or self.junit is not None

    @staticmethod
    def _claimed(path: str) -> Path:
        out = trace.check_writable(path)
        with contextlib.suppress(FileNotFoundError):
            out.unlink()  # an earlier run's verdict must not outlive this run's
        return out

    def write(self, verdict: dict[str, Any], report: str) -> None:
        """Both files, from ``verdict`` (``verdict_json``) and the printed ``report``."""
        if self.json is not None:
            text = json.dumps(verdict, indent=2, ensure_ascii=False) + "\n"
            _replace(self.json, text.encode("utf-8"))
        if self.junit is not None:
            _replace(self.junit, junit_xml(verdict, report))


def _replace(path: Path, data: bytes) -> None:
    """``path`` holds ``data``, whole or not at all (a temporary file renamed over it)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(handle, "wb") as stream:
                stream.write(data)
            os.chmod(temporary, 0o644)  # as a file written plainly would be, not mkstemp's 0600
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
    except OSError as error:
        raise trace.TraceError(f"cannot write {path}: {error.strerror or error}") from None
