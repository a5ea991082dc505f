"""The safety tier: hold a target to what every correct allocator guarantees, whatever its
policy, reading it through the protocol alone (``specs/safety.md``).

No model runs beside the target: its answers are not compared with anyone's. Instead, after every
call, the session checks what it can see:

- S1 no aliasing: a block shared by live tables sits at the same position in each, under the same
  extra key, after the same tokens, and holds the same tokens where both hold any;
- S2 accounting: on each device, the free count is the total minus the distinct blocks the tables
  hold (and the null block, where the target names it);
- S3 placement: every table has a slot for every token, on its group's device;
- S4 mappings: copy-on-write pairs land in the sequence's own table or in a block no table holds
  (a copy the target then dropped), no destination twice; a swap's pairs run from the group's old
  blocks to its new ones, no destination from two sources;
- S5 KV data: the oracle plays the engine: it runs the target's pairs through a KV store (the
  target's own, when it offers ``get_kv_access()``; else an abstract one in the target's ids),
  writes each scheduled token's KV (skipping the prefix the target reports as computed), and
  checks that every readable slot holds its prefix's KV;
- S6 typed errors, and no trace of a failed call when the target declares ``atomic = True``; a
  target that does not may leave anything after a failed call, so the run ends there.

- S7 promises: an OK (a yes) from a ``can_*`` question is kept by the calls that act on it
  (``promises.py``); that a NEVER holds for an empty manager too is the machine's to check, as it
  needs a fresh target.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

from pagedkv.model_tests.lockstep.answers import Answers
from pagedkv.model_tests.lockstep.calls import Divergence, DivergenceKind, run_call
from pagedkv.model_tests.lockstep.ledger import GroupRecord, Ledger
from pagedkv.model_tests.lockstep.observation import Observation, differences, observe
from pagedkv.model_tests.lockstep.promises import Promises
from pagedkv.model_tests.lockstep.show import show_call, show_error, show_value
from pagedkv.model_tests.lockstep.step import Step
from pagedkv.reference import kv_model
from pagedkv.reference.kv_model import KVModel, SlotContent
from pagedkv.specs.errors import OutOfBlocksError, PagedKVError
from pagedkv.specs.manager_calls import ManagerCall
from pagedkv.specs.slots import slot_of
from pagedkv.specs.types import BlockId, CopyPair, Device, ExtraKey, ManagerConfig, Token

T = TypeVar("T")

CROSS_SALT = "pagedkv/cross-attention"
"""Cross-attention KV is of the encoder's tokens, never interchangeable with decoder KV."""


class KVAccess(Protocol):
    """A target's own KV store, seen by the oracle (the optional ``get_kv_access()``)."""

    def write(self, device: Device, block: BlockId, slot: int, content: SlotContent) -> None: ...

    def holds(self, device: Device, block: BlockId, slot: int, content: SlotContent) -> bool: ...

    def copy_blocks(self, pairs: Sequence[CopyPair]) -> None: ...

    def swap_blocks(self, pairs: Sequence[CopyPair], to: Device) -> None: ...


@dataclass
class SimulatedKV:
    """The engine's KV as the target's pairs would leave it: ``pagedkv.reference.kv_model`` in
    target ids. Used when the target offers no KV of its own."""

    block_size: int
    kv: KVModel = kv_model.EMPTY

    def write(self, device: Device, block: BlockId, slot: int, content: SlotContent) -> None:
        self.kv = kv_model.write(self.kv, (device, block, slot), content)

    def holds(self, device: Device, block: BlockId, slot: int, content: SlotContent) -> bool:
        return kv_model.read(self.kv, (device, block, slot)) == content

    def read(self, device: Device, block: BlockId, slot: int) -> SlotContent | None:
        """What the slot holds: a report says whose KV it is."""
        return kv_model.read(self.kv, (device, block, slot))

    def copy_blocks(self, pairs: Sequence[CopyPair]) -> None:
        self.kv = kv_model.copy_blocks(self.kv, pairs, self.block_size, Device.GPU, Device.GPU)

    def swap_blocks(self, pairs: Sequence[CopyPair], to: Device) -> None:
        source = Device.CPU if to is Device.GPU else Device.GPU
        self.kv = kv_model.copy_blocks(self.kv, pairs, self.block_size, source, to)


@dataclass
class SafetySession:
    target: Any
    config: ManagerConfig
    steps: list[Step] = field(default_factory=list)
    ended: bool = False
    """A call failed on a target that does not declare itself atomic: its state is no longer
    defined by anything, so the run stops."""

    def __post_init__(self) -> None:
        self.ledger = Ledger(self.config)
        self.atomic = bool(getattr(self.target, "atomic", False))
        access = getattr(self.target, "get_kv_access", None)
        self.kv: KVAccess = access() if callable(access) else SimulatedKV(self.config.block_size)
        self.pending_prefill: set[int] = set()
        self.promises = Promises()
        self.answers = Answers(self.target, "manager")
        self.seen = self.observe()

    # --- what the target shows --------------------------------------------------------------------

    def observe(self) -> Observation:
        return observe(self.target, self.ledger.seqs, self.ledger.groups)

    def null_block(self) -> BlockId | None:
        get = getattr(self.target, "get_null_block", None)
        return get() if callable(get) else None

    def knows_null_block(self) -> bool:
        return self.config.sliding_window is None or callable(
            getattr(self.target, "get_null_block", None)
        )

    # --- one call ---------------------------------------------------------------------------------

    def call(self, call: ManagerCall[T]) -> T | PagedKVError:
        method, args = call.name, call.args
        prefill_next = method == "get_common_computed_block_ids"
        if not prefill_next:
            self._prefill(list(self.pending_prefill), skip_blocks=0)
        before = self.seen
        shown = show_call(method, args)
        result, error = run_call(self.target, call)
        result = self.answers.take(call, shown, result, error is not None)
        broken = self.promises.after(
            method, args, result if error is None else error, self.ledger.members
        )
        if broken is not None:
            raise Divergence(broken, "promise")
        if error is not None:
            return self._failed(method, args, error, before)
        self.ledger.record(method, args)
        after = self.observe()
        self._check_result(method, args, result, before, after)
        self.seen = after
        self._run_engine(method, args, result)
        findings = self.findings()
        if findings:
            raise _finding(method, args, findings)
        self.answers.recheck("after pagedkv read the target's tables and free counts")
        self.steps.append(Step(method, args, result))
        return cast(T, result)

    def _failed(
        self, method: str, args: tuple[Any, ...], error: BaseException, before: Observation
    ) -> PagedKVError:
        if not isinstance(error, PagedKVError):
            raise Divergence(
                f"{show_call(method, args)}: the target raised an untyped {show_error(error)}",
                "untyped",
            )
        if not self.atomic and isinstance(error, OutOfBlocksError):
            self.ended = True  # out of blocks midway: what is left, seen or not, is undefined
        elif (now := self.observe()) != before:
            if self.atomic:
                raise Divergence(
                    f"{show_call(method, args)} raised {type(error).__name__}, but the target,"
                    " which declares itself atomic, changed its tables or free counts: "
                    + "; ".join(differences(before, now)),
                    "atomicity",
                )
            self.ended = True  # a failure midway: nothing defines what is left
        self.steps.append(Step(method, args, error))
        return error

    # --- playing the engine: kernels and the model's writes ---------------------------------------

    def _run_engine(self, method: str, args: tuple[Any, ...], result: Any) -> None:
        if method == "allocate":
            self.pending_prefill.add(args[0])
        elif method == "append_slots":
            self.kv.copy_blocks(result)
            seq = self.ledger.seqs[args[0]]
            self._write(args[0], range(len(seq.tokens) - len(args[1]), len(seq.tokens)))
        elif method in ("swap_out", "swap_in"):
            self.kv.swap_blocks(result, Device.CPU if method == "swap_out" else Device.GPU)
        elif method == "get_common_computed_block_ids" and isinstance(args[0], list):
            groups = {self.ledger.seqs[s].group_id for s in args[0] if s in self.ledger.seqs}
            self._prefill(list(groups & self.pending_prefill), skip_blocks=len(result))
            self._prefill(list(self.pending_prefill), skip_blocks=0)

    def _prefill(self, group_ids: Iterable[int], skip_blocks: int) -> None:
        """The model's prefill of newly admitted groups, past the prefix the target said it
        had computed already."""
        size = self.config.block_size
        for group_id in group_ids:
            self.pending_prefill.discard(group_id)
            group = self.ledger.groups.get(group_id)
            if group is None:
                continue
            for seq_id in group.seq_ids:
                tokens = self.ledger.seqs[seq_id].tokens
                self._write(seq_id, range(min(skip_blocks * size, len(tokens)), len(tokens)))
            cross = self.seen.cross[group_id]
            for position in range(len(group.encoder_tokens)):
                block, slot = slot_of(cross, position, size)
                self.kv.write(
                    self._device_of(block) or group.device, block, slot, _cross(group, position)
                )

    def _write(self, seq_id: int, positions: range, now: Observation | None = None) -> None:
        table = (now or self.seen).tables[seq_id]
        seq = self.ledger.seqs[seq_id]
        group = self.ledger.groups[seq.group_id]
        for position in positions:
            block, slot = slot_of(table, position, self.config.block_size)
            self.kv.write(
                group.device, block, slot, SlotContent(seq.tokens[: position + 1], group.extra_key)
            )

    # --- the checks -------------------------------------------------------------------------------

    def _check_result(
        self,
        method: str,
        args: tuple[Any, ...],
        result: Any,
        before: Observation,
        after: Observation,
    ) -> None:
        if method == "append_slots":
            table = set(after.tables[args[0]])
            destinations = [d for _, d in result]
            if len(set(destinations)) != len(destinations):
                raise Divergence(
                    f"{show_call(method, args)}: a block is copied into twice: {result}", "pairs"
                )
            others = {
                block
                for seq_id, blocks in after.tables.items()
                if seq_id != args[0]
                for block in blocks
            } | {block for cross in after.cross.values() for block in cross}
            # a copy into a block nobody holds any more (vLLM 0.6.3 copies, then dedups the
            # filled copy onto its cached twin) writes nothing anyone reads
            stray = [d for d in destinations if d not in table and d in others]
            if stray:
                raise Divergence(
                    f"{show_call(method, args)}: copies into {stray}, which other tables hold and"
                    f" the sequence's table {after.tables[args[0]]} does not: their data would"
                    " be overwritten",
                    "pairs",
                )
        elif method in ("swap_out", "swap_in"):
            self._check_swap(method, args[0], result, before, after)

    def _check_swap(
        self,
        method: str,
        group_id: int,
        pairs: list[CopyPair],
        before: Observation,
        after: Observation,
    ) -> None:
        group = self.ledger.groups[group_id]
        old = {b for s in group.seq_ids for b in before.tables[s]} | set(before.cross[group_id])
        new = {b for s in group.seq_ids for b in after.tables[s]} | set(after.cross[group_id])
        sources_of: dict[BlockId, set[BlockId]] = {}
        for source, destination in pairs:
            sources_of.setdefault(destination, set()).add(source)
        twice = {d: sorted(s) for d, s in sources_of.items() if len(s) > 1}
        if twice:
            raise Divergence(f"{method}({group_id}): blocks receive two sources: {twice}", "pairs")
        if not {s for s, _ in pairs} <= old or not set(sources_of) <= new:
            raise Divergence(
                f"{method}({group_id}): the pairs {pairs} do not run from the group's blocks"
                f" before the swap {sorted(old)} to its blocks after {sorted(new)}",
                "pairs",
            )

    def problems(self) -> list[str]:
        return [message for _, message in self.findings()]

    def findings(self) -> list[tuple[DivergenceKind, str]]:
        """Every rule S1-S5 the target's tables and counts break now, each with its kind."""
        view = self.seen
        found: list[tuple[DivergenceKind, list[str]]] = [
            ("placement", self._placement_problems(view)),
            ("aliasing", self._alias_problems(view)),
            ("accounting", self._accounting_problems(view)),
            ("kv", self._kv_problems(view)),
        ]
        return [(kind, message) for kind, messages in found for message in messages]

    def _whose_kv(self, device: Device, block: BlockId, slot: int, wanted: SlotContent) -> str:
        """What the slot holds instead, in words, where the KV store can say."""
        read = getattr(self.kv, "read", None)
        if not callable(read):
            return "its prefix's KV was lost or overwritten"
        held = read(device, block, slot)
        if held is None:
            return "it holds no KV: nothing was written or copied there"
        if not isinstance(held, SlotContent):
            return "its prefix's KV was lost or overwritten"
        if held.extra_key != wanted.extra_key:
            return (
                f"it holds KV computed under another extra key ({show_value(held.extra_key)},"
                f" here {show_value(wanted.extra_key)}): another request's data"
            )
        if held.tokens[-1:] == wanted.tokens[-1:] and len(held.tokens) == len(wanted.tokens):
            return "it holds that token's KV after other tokens: another sequence's data"
        return (
            f"it holds the KV of token {len(held.tokens) - 1} of another sequence: its prefix's"
            " KV was lost or overwritten"
        )

    def _released(self, seq_id: int, index: int) -> bool:
        """Block ``index`` of the sequence lies wholly before the oldest position the next token
        attends to: nothing reads it again, whatever block its entry names."""
        window = self.config.sliding_window
        if window is None:
            return False
        first_needed = len(self.ledger.seqs[seq_id].tokens) - window + 1
        return (index + 1) * self.config.block_size <= first_needed

    def _placement_problems(self, view: Observation) -> list[str]:
        problems = []
        size, null = self.config.block_size, self.null_block()
        for seq_id, table in view.tables.items():
            seq = self.ledger.seqs[seq_id]
            if len(table) * size < len(seq.tokens):
                problems.append(
                    f"sequence {seq_id} has {len(seq.tokens)} tokens but a table of"
                    f" {len(table)} blocks of {size}"
                )
            device = self.ledger.groups[seq.group_id].device
            for index, block in enumerate(table):
                if block != null and not self._released(seq_id, index):
                    problems += self._on_device(f"sequence {seq_id}", block, device)
        for group_id, cross in view.cross.items():
            group = self.ledger.groups[group_id]
            if len(cross) * size < len(group.encoder_tokens):
                problems.append(f"group {group_id}'s cross-attention table is too short")
            devices = {self._device_of(block) for block in cross}
            if None in devices or len(devices) > 1:
                problems.append(
                    f"group {group_id}'s cross table {cross} is not on one device"
                    " (a swap may leave it on the GPU, but not split it or name a foreign block)"
                )
        return problems

    def _device_of(self, block: BlockId) -> Device | None:
        """The device whose ids include ``block`` (GPU ids first, then CPU ids)."""
        gpu = self.config.num_gpu_blocks
        if 0 <= block < gpu:
            return Device.GPU
        if gpu <= block < gpu + self.config.num_cpu_blocks:
            return Device.CPU
        return None

    def _on_device(self, where: str, block: BlockId, device: Device) -> list[str]:
        gpu = self.config.num_gpu_blocks
        ids = range(gpu) if device is Device.GPU else range(gpu, gpu + self.config.num_cpu_blocks)
        if block in ids:
            return []
        return [f"{where} names block {block}, which is not a {device.value} block"]

    def _alias_problems(self, view: Observation) -> list[str]:
        size, null = self.config.block_size, self.null_block()
        holders: dict[tuple[Device, BlockId], list[_Holder]] = {}
        for seq_id, table in view.tables.items():
            seq = self.ledger.seqs[seq_id]
            group = self.ledger.groups[seq.group_id]
            for index, block in enumerate(table):
                if block == null or self._released(seq_id, index):
                    continue
                holder = _Holder(f"sequence {seq_id}", index, group.extra_key, seq.tokens)
                holders.setdefault((group.device, block), []).append(holder)
        for group_id, cross in view.cross.items():
            group = self.ledger.groups[group_id]
            key = _cross_key(group.extra_key)
            for index, block in enumerate(cross):
                holder = _Holder(f"group {group_id} (cross)", index, key, group.encoder_tokens)
                holders.setdefault((self._device_of(block) or group.device, block), []).append(
                    holder
                )
        problems = []
        for (device, block), found in holders.items():
            first = found[0]
            for other in found[1:]:
                why = first.conflict(other, size)
                if why:
                    problems.append(
                        f"{device.value} block {block} is shared by {first.where} (position"
                        f" {first.index}) and {other.where} (position {other.index}), {why}"
                    )
        return problems

    def _accounting_problems(self, view: Observation) -> list[str]:
        if not self.knows_null_block():
            return self._accounting_without_null_block(view)
        null = self.null_block()
        held: dict[Device, set[BlockId]] = {Device.GPU: set(), Device.CPU: set()}
        for seq_id, table in view.tables.items():
            device = self.ledger.group_of(seq_id).device
            held[device] |= {b for b in table if b != null}
        for cross in view.cross.values():
            for block in cross:
                held[self._device_of(block) or Device.GPU].add(block)
        if null is not None:
            held[Device.GPU].add(null)
        totals = {Device.GPU: self.config.num_gpu_blocks, Device.CPU: self.config.num_cpu_blocks}
        problems = []
        for device, blocks in held.items():
            expected = totals[device] - len(blocks)
            if view.free[device] != expected:
                problems.append(
                    f"the target reports {view.free[device]} free {device.value} blocks, but its"
                    f" tables hold {len(blocks)} of {totals[device]}"
                    + (" and the null block" if null is not None and device is Device.GPU else "")
                    + f", which leaves {expected}: "
                    + (
                        "a block is leaked"
                        if view.free[device] < expected
                        else "a held block is counted free"
                    )
                )
        return problems

    def _accounting_without_null_block(self, view: Observation) -> list[str]:
        """A windowed target that does not name its null block: an entry past the window may be
        a block still held (a target may release later than the window allows) or the null block,
        which may also sit in no table at all. So each free count is bounded, not known: at most
        the device's blocks minus those in the windows, at least that minus every entry past them
        (and, on the GPU, the null block)."""
        firm: dict[Device, set[BlockId]] = {Device.GPU: set(), Device.CPU: set()}
        maybe: dict[Device, set[BlockId]] = {Device.GPU: set(), Device.CPU: set()}
        for seq_id, table in view.tables.items():
            device = self.ledger.group_of(seq_id).device
            for index, block in enumerate(table):
                (maybe if self._released(seq_id, index) else firm)[device].add(block)
        for cross in view.cross.values():
            for block in cross:
                firm[self._device_of(block) or Device.GPU].add(block)
        totals = {Device.GPU: self.config.num_gpu_blocks, Device.CPU: self.config.num_cpu_blocks}
        problems = []
        for device, total in totals.items():
            most = total - len(firm[device])
            least = most - len(maybe[device] - firm[device]) - (device is Device.GPU)
            free = view.free[device]
            if not least <= free <= most:
                what = "a block is leaked" if free < least else "a held block is counted free"
                problems.append(
                    f"the target reports {free} free {device.value} blocks, but its tables hold"
                    f" {len(firm[device])} of {total} within their windows, which leaves between"
                    f" {max(least, 0)} and {most} (its null block unnamed): {what}"
                )
        return problems

    def _kv_problems(self, view: Observation) -> list[str]:
        size = self.config.block_size
        problems = []
        for seq_id, table in view.tables.items():
            seq = self.ledger.seqs[seq_id]
            group = self.ledger.groups[seq.group_id]
            if seq.group_id in self.pending_prefill:
                continue
            for position in range(len(seq.tokens)):
                if self._released(seq_id, position // size):
                    continue
                block, slot = slot_of(table, position, size)
                wanted = SlotContent(seq.tokens[: position + 1], group.extra_key)
                if not self.kv.holds(group.device, block, slot, wanted):
                    problems.append(
                        f"sequence {seq_id}: the KV in {group.device.value} block {block} slot"
                        f" {slot} is not that of its token {position}"
                        f" ({self._whose_kv(group.device, block, slot, wanted)})"
                    )
                    break
        for group_id, cross in view.cross.items():
            group = self.ledger.groups[group_id]
            if group_id in self.pending_prefill:
                continue
            for position in range(len(group.encoder_tokens)):
                block, slot = slot_of(cross, position, size)
                device = self._device_of(block) or group.device
                if not self.kv.holds(device, block, slot, _cross(group, position)):
                    problems.append(
                        f"group {group_id}: cross-attention KV of token {position} lost"
                    )
                    break
        return problems


@dataclass(frozen=True)
class _Holder:
    where: str
    index: int
    key: ExtraKey
    tokens: tuple[Token, ...]

    def conflict(self, other: _Holder, size: int) -> str:
        """Why one block cannot serve both, or ''."""
        if other.index != self.index:
            return "at different positions"
        if other.key != self.key:
            return (
                f"under different extra keys ({show_value(self.key)} and {show_value(other.key)})"
            )
        start = self.index * size
        if len(self.tokens) <= start and len(other.tokens) <= start:
            return ""  # empty for both (lookahead slots a fork shared): the first write copies
        held = min(len(self.tokens), len(other.tokens), start + size)
        if self.tokens[:held] != other.tokens[:held]:
            return "after different tokens"
        return ""


def _cross_key(key: ExtraKey) -> ExtraKey:
    return ExtraKey(key.lora_id, CROSS_SALT)


def _cross(group: GroupRecord, position: int) -> SlotContent:
    return SlotContent(group.encoder_tokens[: position + 1], _cross_key(group.extra_key))


def _finding(
    method: str, args: tuple[Any, ...], findings: list[tuple[DivergenceKind, str]]
) -> Divergence:
    """One divergence for every rule a call broke, each part kept with its kind."""
    call = show_call(method, args)
    return Divergence(
        f"{call}: " + "; ".join(message for _, message in findings),
        parts=[(kind, f"{call}: {message}") for kind, message in findings],
    )
