"""The peers' own files: which wheel each comes from, fetching them into the cache, importing them.

A peer is taken from its *published wheel* (``pip download --no-deps``), the code its users
install, never from a repository snapshot. Only the block-manager files are unpacked, into
``.peers/<name>/`` (ignored by git; ``PAGEDKV_PEERS_CACHE`` moves it); the wheel is deleted at
once. ``load`` imports those files under their own package name (``vllm``, ``nanovllm``) with
pagedkv's stand-ins (``standins/``) in place of everything else they import, in a private
``sys.modules`` scope, so two versions of one engine (vLLM 0.6.3 and vLLM v1), or a real vLLM
installed beside pagedkv, never meet.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = "SOURCE.json"
FETCH_HINT = "run python -m pagedkv.model_tests.peers.run fetch (make peers-fetch in a checkout)"
"""How to fetch the peers, said where one is missing: an installed wheel has no Makefile."""


def cache_root() -> Path:
    return Path(os.environ.get("PAGEDKV_PEERS_CACHE", ROOT / ".peers"))


@dataclass(frozen=True)
class Source:
    """One published wheel and the files of it a peer needs."""

    name: str
    """The cache directory, e.g. ``vllm-0.6.3.post1``."""
    requirement: str
    """What ``pip download`` is asked for, pinned."""
    package: str
    """The top-level import name inside the wheel."""
    members: tuple[str, ...]
    """The files unpacked, as paths inside the wheel."""

    @property
    def directory(self) -> Path:
        return cache_root() / self.name

    @property
    def fetched(self) -> bool:
        """Every member is in the cache (a cache written when the source had fewer members is
        fetched again)."""
        manifest = self.directory / MANIFEST
        if not manifest.is_file():
            return False
        files = json.loads(manifest.read_text(encoding="utf-8")).get("files", {})
        return all(member in files for member in self.members)


VLLM_V0 = Source(
    "vllm-0.6.3.post1",
    "vllm==0.6.3.post1",
    "vllm",
    (
        "vllm/core/__init__.py",
        "vllm/core/interfaces.py",
        "vllm/core/block_manager.py",
        "vllm/core/evictor_v2.py",
        "vllm/core/block/__init__.py",
        "vllm/core/block/interfaces.py",
        "vllm/core/block/common.py",
        "vllm/core/block/utils.py",
        "vllm/core/block/naive_block.py",
        "vllm/core/block/prefix_caching_block.py",
        "vllm/core/block/cpu_gpu_block_allocator.py",
        "vllm/core/block/block_table.py",
    ),
)
"""vLLM 0.6.3.post1, the last release whose default block manager is ``SelfAttnBlockSpaceManager``
over ``CpuGpuBlockAllocator`` (block manager v2)."""

VLLM_V1 = Source(
    "vllm-0.33.0",
    "vllm==0.33.0",
    "vllm",
    (
        "vllm/v1/__init__.py",
        "vllm/v1/core/__init__.py",
        "vllm/v1/core/block_pool.py",
        "vllm/v1/core/kv_cache_utils.py",
        "vllm/v1/core/kv_cache_manager.py",
        "vllm/v1/core/kv_cache_coordinator.py",
        "vllm/v1/core/single_type_kv_cache_manager.py",
        "vllm/v1/hisparse/block_pool.py",
        "vllm/v1/kv_cache_spec_registry.py",
        "vllm/v1/request.py",
        "vllm/utils/hashing.py",
        "vllm/utils/math_utils.py",
    ),
)
"""The latest vLLM release on PyPI when this was written: its v1 engine's ``BlockPool``, and
above it the request level (``KVCacheManager``, the coordinators, the single-type managers),
vLLM's ``Request``, its block hasher's hash functions and its KV-cache spec registry."""

NANO_VLLM = Source(
    "nano-vllm-fork-20260210",
    "nano-vllm-fork==20260210",
    "nanovllm",
    ("nanovllm/engine/block_manager.py",),
)
"""nano-vllm itself is not on PyPI (its README installs it from git); ``nano-vllm-fork`` is the
published wheel of it (same author and homepage in its metadata, plus a fix in ``deallocate``)."""

SGLANG = Source(
    "sglang-0.5.23",
    "sglang==0.5.23",
    "sglang",
    (
        "sglang/srt/mem_cache/radix_cache.py",
        "sglang/srt/mem_cache/base_prefix_cache.py",
        "sglang/srt/mem_cache/cache_init_params.py",
        "sglang/srt/mem_cache/evict_policy.py",
        "sglang/srt/mem_cache/events.py",
        "sglang/srt/mem_cache/allocator/base.py",
        "sglang/srt/mem_cache/allocator/token.py",
        "sglang/srt/mem_cache/allocator/paged.py",
    ),
)
"""SGLang's prefix cache (``RadixCache``, its base class, its eviction strategies, its KV event
recorder) and its two allocators, page size 1 (``TokenToKVPoolAllocator``) and larger
(``PagedTokenToKVPoolAllocator``), whose ``alloc`` and ``free`` run on CPU tensors."""

SOURCES = (VLLM_V0, VLLM_V1, NANO_VLLM, SGLANG)


class PeerSourceError(Exception):
    """A peer's files are missing from the cache, or cannot be fetched or imported."""


# --- fetching -----------------------------------------------------------------------------------


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch(source: Source, log: Callable[[str], None] = print) -> Path:
    """Download ``source``'s wheel, unpack its members into the cache, delete the wheel."""
    if source.fetched:
        log(f"{source.name}: cached in {source.directory}")
        return source.directory
    with tempfile.TemporaryDirectory(prefix="pagedkv-peer-") as tmp:
        log(f"{source.name}: pip download --no-deps {source.requirement}")
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        done = subprocess.run(
            [*command, "--quiet", "--dest", tmp, source.requirement],
            capture_output=True,
            text=True,
            check=False,
        )
        wheels = sorted(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            last = (done.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
            raise PeerSourceError(f"{source.name}: pip download failed: {last}")
        wheel = wheels[0]
        wheel_hash = _sha256(wheel.read_bytes())
        staging = Path(tmp) / "unpacked"
        files: dict[str, str] = {}
        with zipfile.ZipFile(wheel) as archive:
            names = set(archive.namelist())
            for member in source.members:
                if member not in names:
                    raise PeerSourceError(f"{source.name}: {wheel.name} has no {member}")
                data = archive.read(member)
                target = staging / member
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                files[member] = _sha256(data)
        manifest = {
            "requirement": source.requirement,
            "wheel": wheel.name,
            "wheel_sha256": wheel_hash,
            "files": files,
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        source.directory.parent.mkdir(parents=True, exist_ok=True)
        if source.directory.exists():  # written when the source had fewer members
            shutil.rmtree(source.directory)
        staging.replace(source.directory)
        log(f"{source.name}: {len(files)} files from {wheel.name} in {source.directory}")
    return source.directory


# --- importing ----------------------------------------------------------------------------------


def module(name: str, attributes: Mapping[str, object]) -> ModuleType:
    """A stand-in module: ``name`` with exactly ``attributes``."""
    made = ModuleType(name, f"pagedkv stand-in for {name}")
    for key, value in attributes.items():
        setattr(made, key, value)
    return made


class _CacheFinder(importlib.abc.MetaPathFinder):
    """Finds ``package`` and its submodules in the cache; any other module of the package that
    is neither cached nor stood in for is an error naming it."""

    def __init__(self, root: Path, package: str) -> None:
        self.root = root
        self.package = package

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.package and not fullname.startswith(self.package + "."):
            return None
        where = self.root.joinpath(*fullname.split("."))
        if where.with_suffix(".py").is_file():
            return importlib.util.spec_from_file_location(fullname, where.with_suffix(".py"))
        if (where / "__init__.py").is_file():
            return importlib.util.spec_from_file_location(
                fullname, where / "__init__.py", submodule_search_locations=[str(where)]
            )
        if where.is_dir():  # a package whose __init__ was not unpacked: a namespace
            spec = importlib.machinery.ModuleSpec(fullname, None, is_package=True)
            spec.submodule_search_locations = [str(where)]
            return spec
        raise ModuleNotFoundError(
            f"the cached peer files import {fullname}, which is neither unpacked nor stood in"
            " for (model_tests/peers/standins/)",
            name=fullname,
        )


@contextmanager
def _private_modules(packages: Sequence[str]) -> Iterator[None]:
    """Imports of ``packages`` inside see only what is imported inside; afterwards
    ``sys.modules`` is as it was (the loaded modules live on through their references)."""

    def ours(name: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in packages)

    saved = {name: mod for name, mod in sys.modules.items() if ours(name)}
    for name in saved:
        del sys.modules[name]
    try:
        yield
    finally:
        for name in [n for n in sys.modules if ours(n)]:
            del sys.modules[name]
        sys.modules.update(saved)


_loaded: dict[tuple[str, tuple[str, ...]], dict[str, ModuleType]] = {}


def load(
    source: Source, standins: Mapping[str, ModuleType], wanted: Sequence[str]
) -> dict[str, ModuleType]:
    """Import the cached modules ``wanted`` of ``source`` with ``standins`` (module name →
    stand-in module) in place of the engine's other modules. Loaded once per process."""
    key = (source.name, tuple(wanted))
    if key in _loaded:
        return _loaded[key]
    if not source.fetched:
        raise PeerSourceError(
            f"{source.name} is not in the peers cache ({source.directory}): {FETCH_HINT}"
        )
    finder = _CacheFinder(source.directory, source.package)
    with _private_modules([source.package, *standins]):
        sys.modules.update(standins)
        sys.meta_path.insert(0, finder)
        try:
            loaded = {name: importlib.import_module(name) for name in wanted}
        except ImportError as error:
            raise PeerSourceError(f"{source.name}: {error}") from error
        finally:
            sys.meta_path.remove(finder)
    _loaded[key] = loaded
    return loaded
