"""vLLM v1's ``KVCacheManager`` (the latest release on PyPI) behind pagedkv's
``RequestKVManager`` (``specs/request_level.md``): the request level, out of the box.

vLLM's own code does everything about blocks: ``KVCacheManager`` over its coordinator
(``UnitaryKVCacheCoordinator`` for one group, ``HybridKVCacheCoordinator`` for full attention
beside a sliding window, ``KVCacheCoordinatorNoPrefixCache`` without caching), the single-type
managers (``FullAttentionManager``, ``SlidingWindowManager``) and ``BlockPool``; vLLM's own
``Request`` objects carry the tokens, and vLLM's own block hasher (``get_request_block_hasher``
with the engine's default hash, ``sha256``) computes their block hashes. The adapter plays the
scheduler and nothing more:

- the configuration: one ``KVCacheGroupSpec`` per group, ``FullAttentionSpec`` or
  ``SlidingWindowSpec`` (stand-ins carrying the block size and the window), over one pool of
  ``num_blocks`` ids (vLLM's null block is id 0, as pagedkv's ``NULL_BLOCK``); the scheduler
  block size and the hash block size are the block size; the prefix-cache retention interval
  is the engine's default, ``0`` (``CacheConfig.prefix_cache_retention_interval``);
  ``max_model_len=None`` is a length no request reaches;
- the request: one vLLM ``Request`` per request id, kept across calls as the engine keeps it
  (also across a preemption); each call appends the tokens the pagedkv ``Request`` has gained
  (``append_output_token_ids``, which extends its block hashes) and sets
  ``num_computed_tokens``. A request whose tokens or keys are not an extension of the kept
  one's gets a new vLLM ``Request`` (vLLM never rewrites a request's tokens). The LoRA id
  becomes a ``LoRARequest`` (name ``lora-<id>``), the salt ``cache_salt``, each multimodal
  input a feature with its identifier and position, sorted by offset as vLLM's input
  processor sorts them;
- admission: ``allocate_slots`` for a request vLLM holds no blocks for first looks the cache
  up as ``Scheduler.schedule`` does right before it, and keeps vLLM's third answer (the
  shared-prefix boundary) on the request (``specs/request_level.md`` §4.7); it hands vLLM the
  hit's blocks as ``KVCacheBlocks`` (the empty one when there is none, as the scheduler passes
  ``get_computed_blocks``' answer) and every other argument at vLLM's defaults;
- the answers: ``KVCacheBlocks`` become block ids per group; events are renamed from vLLM's
  hashes to pagedkv's (``specs.request_hashes``): the adapter knows which block of which
  request each vLLM hash was computed for; ``view()`` reads the pool (``ref_cnt``,
  ``block_hash``, the free queue in order) and each manager's ``req_to_blocks`` and
  ``num_cached_block``;
- argument checks are ``specs.request_validation``'s, as a scheduler never hands vLLM an
  unknown request or a hit that is not cached; a request is known from its first successful
  ``allocate_slots`` to its ``free``.

Where vLLM differs from the spec, the adapter passes the difference through. The two
switches (off by default) configure vLLM as pagedkv's own profile chooses (``dense`` window
retention, no events without caching: both configurations vLLM offers), so that the
``pagedkv`` profile's worked examples can hold vLLM too; the ``vllm-v1`` profile needs
neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from pagedkv.model_tests.peers import sources
from pagedkv.model_tests.peers.standins import vllm_v1_manager as standins
from pagedkv.model_tests.peers.vllm_v1_events import pagedkv_event
from pagedkv.specs.errors import UnknownRequestError
from pagedkv.specs.request_hashes import request_block_hashes
from pagedkv.specs.request_types import (
    GroupBlocks,
    KVEvent,
    Request,
    RequestConfig,
    RequestId,
)
from pagedkv.specs.request_validation import (
    check_allocate_slots,
    check_request,
    check_request_config,
    check_request_id,
)
from pagedkv.specs.request_view import (
    CachedKey,
    RequestBlockView,
    RequestManagerView,
    RequestTableView,
)
from pagedkv.specs.types import BlockHash, BlockId

NO_LENGTH_CAP = 1 << 40
"""``max_model_len`` for a configuration without one: no request reaches it."""

ENGINE_RETENTION_INTERVAL = 0
"""vLLM's ``CacheConfig.prefix_cache_retention_interval`` default, which the engine copies into
``KVCacheConfig``: a sliding-window group keeps only the blocks a request replaying the prompt
can hit (its last ``cdiv(W - 1, B)`` blocks before ``num_prompt_tokens - 1``)."""


def modules() -> dict[str, ModuleType]:
    return sources.load(
        sources.VLLM_V1,
        standins.MODULES,
        (
            "vllm.v1.core.kv_cache_manager",
            "vllm.v1.core.kv_cache_utils",
            "vllm.v1.core.single_type_kv_cache_manager",
            "vllm.v1.kv_cache_spec_registry",
            "vllm.v1.request",
            "vllm.utils.hashing",
        ),
    )


def _register_managers(loaded: dict[str, ModuleType]) -> None:
    """The two registrations of vLLM's ``register_all_kvcache_specs`` this level needs (the
    rest of that function reaches into the platform layer): a full-attention spec gets a
    ``FullAttentionManager``, a sliding-window spec a ``SlidingWindowManager``."""
    registry = loaded["vllm.v1.kv_cache_spec_registry"].KVCacheSpecRegistry
    managers = loaded["vllm.v1.core.single_type_kv_cache_manager"]
    for spec, manager in (
        (standins.FullAttentionSpec, managers.FullAttentionManager),
        (standins.SlidingWindowSpec, managers.SlidingWindowManager),
    ):
        registry.register(spec, manager, uniform_type_base_spec=spec)


@dataclass(frozen=True)
class Switches:
    """vLLM configured as policy ``pagedkv`` chooses (``specs/peers.md`` P1, P2; the
    ``vllm-v1`` profile takes vLLM's defaults instead); all off by default."""

    dense_window_retention: bool = False
    """Build the KV-cache config with ``prefix_cache_retention_interval=None`` (dense): a
    sliding-window group caches every full block (policy ``request_window_retention=dense``)
    instead of only the replay boundary's tail (the engine's default, ``0``)."""
    events_only_with_caching: bool = False
    """Turn vLLM's KV events on only with prefix caching (vLLM allows them without it, with a
    warning, and then reports ``AllBlocksCleared`` at every successful reset)."""


class VllmV1Manager:
    """vLLM's ``KVCacheManager`` with events on, behind ``RequestKVManager``."""

    def __init__(self, config: RequestConfig, switches: Switches | None = None) -> None:
        self._config = check_request_config(config)
        self.switches = switches or Switches()
        loaded = modules()
        _register_managers(loaded)
        utils = loaded["vllm.v1.core.kv_cache_utils"]
        hash_function = loaded["vllm.utils.hashing"].sha256
        utils.init_none_hash(hash_function)
        self._utils = utils
        self._request_class: Any = loaded["vllm.v1.request"].Request
        self._hasher = utils.get_request_block_hasher(config.block_size, hash_function)
        retention = None if self.switches.dense_window_retention else ENGINE_RETENTION_INTERVAL
        groups = [
            standins.KVCacheGroupSpec([f"layers.{index}"], self._spec(group.sliding_window))
            for index, group in enumerate(config.groups)
        ]
        manager_class = loaded["vllm.v1.core.kv_cache_manager"].KVCacheManager
        self._v1: Any = manager_class(
            standins.KVCacheConfig(
                num_blocks=config.num_blocks,
                kv_cache_tensors=[],
                kv_cache_groups=groups,
                prefix_cache_retention_interval=retention,
            ),
            max_model_len=config.max_model_len or NO_LENGTH_CAP,
            scheduler_block_size=config.block_size,
            hash_block_size=config.block_size,
            enable_caching=config.enable_caching,
            enable_kv_cache_events=config.enable_caching
            or not self.switches.events_only_with_caching,
        )
        self._pool: Any = self._v1.block_pool
        self._mirrors: dict[RequestId, tuple[Request, Any]] = {}
        """Each request's last pagedkv value and the vLLM ``Request`` kept for it."""
        self._known: set[RequestId] = set()
        self._names: dict[bytes, BlockHash] = {}
        """vLLM's block hash -> pagedkv's, for every block of every request synced."""

    def _spec(self, window: int | None) -> standins.KVCacheSpec:
        size = self._config.block_size
        if window is None:
            return standins.FullAttentionSpec(size)
        return standins.SlidingWindowSpec(size, sliding_window=window)

    @property
    def config(self) -> RequestConfig:
        return self._config

    @property
    def kv_cache_manager(self) -> Any:
        """vLLM's own ``KVCacheManager``, as configured here (``vllm_v1_replay.py`` drives it
        directly, as vLLM's scheduler does)."""
        return self._v1

    def vllm_request(self, request: Request) -> Any:
        """A new vLLM ``Request`` for ``request``'s prompt and keys: vLLM's engine makes it when
        the request arrives, and computes its prompt's block hashes there."""
        return self._new_mirror(request)

    # --- the vLLM request -----------------------------------------------------------------------

    def _new_mirror(self, request: Request) -> Any:
        prompt = list(request.tokens[: request.num_prompt_tokens])
        key = request.extra_key
        lora = (
            None
            if key.lora_id is None
            else standins.LoRARequest(f"lora-{key.lora_id}", key.lora_id, f"/lora/{key.lora_id}")
        )
        features = [
            standins.MultiModalFeatureSpec(
                item.identifier, standins.PlaceholderRange(item.offset, item.length)
            )
            for item in sorted(request.multimodal, key=lambda item: item.offset)
        ]
        return self._request_class(
            request_id=request.request_id,
            prompt_token_ids=prompt,
            sampling_params=standins.SamplingParams(),
            pooling_params=None,
            lora_request=lora,
            cache_salt=key.cache_salt,
            mm_features=features,
            block_hasher=self._hasher,
        )

    def _sync(self, request: Request) -> Any:
        """The vLLM ``Request`` for ``request``: the kept one with the new tokens appended, or a
        new one; its ``num_computed_tokens`` set; its hashes named."""
        kept = self._mirrors.get(request.request_id)
        mirror = None
        if kept is not None:
            before, mirror = kept
            extends = (
                before.num_prompt_tokens == request.num_prompt_tokens
                and before.extra_key == request.extra_key
                and before.multimodal == request.multimodal
                and request.tokens[: len(before.tokens)] == before.tokens
            )
            if not extends:
                mirror = None
        if mirror is None:
            mirror = self._new_mirror(request)
        gained = list(request.tokens[mirror.num_tokens :])
        if gained:
            mirror.append_output_token_ids(gained)
        mirror.num_computed_tokens = request.num_computed_tokens
        self._mirrors[request.request_id] = (request, mirror)
        named = request_block_hashes(request, self._config.block_size)
        for vllm_hash, name in zip(mirror.block_hashes, named, strict=True):
            self._names.setdefault(bytes(vllm_hash), name)
        return mirror

    def _name(self, vllm_hash: bytes) -> BlockHash:
        return self._names[bytes(vllm_hash)]

    # --- the protocol ---------------------------------------------------------------------------

    def get_computed_blocks(self, request: Request) -> tuple[GroupBlocks, int]:
        checked = check_request(self._config, request)
        mirror = self._sync(checked)
        blocks, num_tokens, _ = self._v1.get_computed_blocks(mirror)
        return [list(ids) for ids in blocks.get_block_ids()], int(num_tokens)

    def _cached_as(self, block: BlockId, key: CachedKey) -> bool:
        vllm_key = self._pool.blocks[block].block_hash
        if vllm_key is None or self._utils.get_group_id(vllm_key) != key.group:
            return False
        return self._names.get(bytes(self._utils.get_block_hash(vllm_key))) == key.block_hash

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: GroupBlocks | None = None,
        num_lookahead_tokens: int = 0,
    ) -> GroupBlocks | None:
        if isinstance(request, Request):
            self._sync(check_request(self._config, request))  # names the hashes the hit check reads
        args = check_allocate_slots(
            self._config,
            request,
            num_new_tokens,
            num_new_computed_tokens,
            new_computed_blocks,
            num_lookahead_tokens,
            is_known=self._known.__contains__,
            cached_as=self._cached_as,
        )
        mirror = self._sync(args.request)
        if args.request.request_id not in self._known:  # admission: the scheduler's lookup
            mirror.shared_prefix_boundary = self._v1.get_computed_blocks(mirror)[2]
        hit = self._v1.create_kv_cache_blocks(
            tuple([self._pool.blocks[block] for block in blocks] for blocks in args.hit)
        )
        answer = self._v1.allocate_slots(
            mirror,
            args.num_new_tokens,
            num_new_computed_tokens=args.num_new_computed_tokens,
            new_computed_blocks=hit,
            num_lookahead_tokens=args.num_lookahead_tokens,
        )
        if answer is None:
            return None
        self._known.add(args.request.request_id)
        return [list(ids) for ids in answer.get_block_ids()]

    def free(self, request_id: RequestId) -> None:
        checked = check_request_id(request_id)
        kept = self._mirrors.get(checked)
        self._v1.free(kept[1] if kept is not None else _Unallocated(checked))
        self._known.discard(checked)

    def get_block_ids(self, request_id: RequestId) -> GroupBlocks:
        checked = check_request_id(request_id)
        if checked not in self._known:
            raise UnknownRequestError(f"request {checked!r} holds no blocks")
        return [list(ids) for ids in self._v1.get_block_ids(checked)]

    def num_free_blocks(self) -> int:
        return int(self._pool.get_num_free_blocks())

    def usage(self) -> float:
        return float(self._v1.usage)

    def reset_prefix_cache(self) -> bool:
        return bool(self._v1.reset_prefix_cache())

    def take_events(self) -> list[KVEvent]:
        return [pagedkv_event(event, self._name) for event in self._v1.take_events()]

    def view(self) -> RequestManagerView:
        blocks = {}
        for block in self._pool.blocks[1:]:
            key = block.block_hash
            cached = (
                None
                if key is None
                else CachedKey(
                    self._utils.get_group_id(key), self._name(self._utils.get_block_hash(key))
                )
            )
            blocks[int(block.block_id)] = RequestBlockView(int(block.ref_cnt), cached)
        free_queue = tuple(
            int(block.block_id) for block in self._pool.free_block_queue.get_all_free_blocks()
        )
        managers = self._v1.coordinator.single_type_managers
        requests = {
            request_id: RequestTableView(
                tuple(
                    tuple(int(b.block_id) for b in m.req_to_blocks.get(request_id, ()))
                    for m in managers
                ),
                tuple(int(m.num_cached_block.get(request_id, 0)) for m in managers),
            )
            for request_id in sorted(self._known)
        }
        return RequestManagerView(self._config, blocks, free_queue, requests)


@dataclass(frozen=True)
class _Unallocated:
    """What ``KVCacheManager.free`` reads of a request the adapter never synced (an abort before
    any call): its id."""

    request_id: RequestId
