"""The mutants that change nothing a caller can observe, each with the argument why.

Keyed by (file, the mutated line's text stripped, the mutation), so that an entry survives edits
elsewhere in its file; an entry whose line is edited stops matching and its mutant is reported as
a gap until it is read again. Each entry was read and argued by hand from a survivor of a run
(``make mutate``); ``test_mutate.py`` checks that every entry still names a mutant.
"""

from __future__ import annotations

_COMPACTION = (
    "when the evictor's heap is rebuilt bounds its memory only: the live entries, and so the"
    " eviction order, stay the same"
)
EQUIVALENT: dict[tuple[str, str, str], str] = {
    ("optimized/evictor.py", "self._compact_if_stale()", "delete the call"): _COMPACTION,
    (
        "optimized/evictor.py",
        "if len(self._heap) - live > 2 * live + _SLACK:",
        "2 -> 3",
    ): _COMPACTION,
    (
        "optimized/evictor.py",
        "if len(self._heap) - live > 2 * live + _SLACK:",
        "Add -> Sub",
    ): _COMPACTION,
    ("optimized/evictor.py", "_SLACK = 32", "32 -> 33"): _COMPACTION,
    (
        "reference/swap.py",
        "if view.content_hash is not None and view.prefix is not None:",
        "And -> Or",
    ): ("a block view's prefix is set exactly when its hash is (I3), so either test is both"),
    ("optimized/free_list.py", "heapq.heapify(self.heap)", "delete the call"): (
        "every pool builds its free list from config.block_ids, a rising range: already a heap"
    ),
    (
        "reference/kv_model.py",
        "for (_, d), contents in zip(pairs, gathered, strict=True):",
        "True -> False",
    ): "gathered is built with one entry per pair: zip's strict check can never fire",
    ("reference/pool_state.py", "release_clock: int = 0", "0 -> 1"): (
        "release times are only compared with each other (the earliest given back is evicted"
        " first, allocation.py) and the clock only rises: where it starts changes no order; no"
        " view shows it"
    ),
    (
        "reference/defragmenter.py",
        "if len(pairs) == config.max_pairs or free_id > used_id:",
        "Gt -> GtE",
    ): "a free id is never a used id (free_ids leaves out every id with a ref count)",
    ("reference/defragmenter.py", "break", "break -> continue"): (
        "once the condition holds it holds for every later pair (used ids fall, free ids rise;"
        " pairs no longer grows), so the loop appends nothing more either way"
    ),
    ("optimized/evictor.py", "if len(self._heap) - live > 2 * live + _SLACK:", "Sub -> Add"): (
        _COMPACTION
    ),
    ("optimized/evictor.py", "if len(self._heap) - live > 2 * live + _SLACK:", "Gt -> GtE"): (
        _COMPACTION
    ),
    **{
        ("optimized/block_manager.py", f"if type({name}) is not int or {name} < 0:", mutation): (
            "the test only picks whether check_count runs; check_count returns a plain int >= 0"
            " unchanged, so sending 0 through it as well changes nothing"
        )
        for name in ("num_new", "lookahead")
        for mutation in ("0 -> 1", "Lt -> LtE")
    },
    (
        "reference/block_pool.py",
        "if not state.config.enable_caching or not checked:",
        "Or -> And",
    ): (
        "either early return gives []: without caching no block is ever computed (mark_computed"
        " returns first, and hits and dedups, which mark under promoted_batch, need the cache),"
        " so every run is empty; with no chains there are no runs; either way no column is"
        " common"
    ),
    ("optimized/evictor.py", "self._heap.clear()", "delete the call"): (
        "with `_live` emptied every entry left in the heap is stale: `pop` skips it and the next"
        " rebuild drops it"
    ),
    (
        "reference/block_manager.py",
        "if window is None or null_block is None:",
        "Or -> And",
    ): (
        "append_slots takes the null block (take_null_block) before it calls"
        " _release_out_of_window, and takes one exactly when there is a window: there the window"
        " is None exactly when the null block is, so `or` and `and` agree"
    ),
    ("reference/block_manager.py", "stopped = ComputedList((), stopped=True)", "True -> False"): (
        "the first entry changed only because release_blocks pointed it at the null block, which"
        " is never computed (mark_computed marks full blocks only, it holds no token, and having"
        " no hash it is never a hit): an empty list that may grow stops at it at once, and a"
        " swap keeps null entries where they are"
    ),
    (
        "reference/block_manager.py",
        "for seq_id, table in zip(ids, tables, strict=True):",
        "True -> False",
    ): "tables is built with one entry per id: zip's strict check can never fire",
    (
        "reference/block_manager.py",
        "if kept.stopped or len(kept.blocks) >= limit:",
        "GtE -> Gt",
    ): (
        "at len == limit (not stopped) the mutant takes no block from table.blocks[limit:limit]"
        " and returns ComputedList(kept.blocks, stopped=limit < limit), which is kept itself"
    ),
    (
        "reference/block_manager.py",
        "if not state.config.enable_caching or not lists:",
        "Or -> And",
    ): (
        "without caching no block is ever computed (mark_computed returns first, and a hit,"
        " which marks under promoted_batch, needs the cache), so every kept list is empty and"
        " the common prefix is [] either way; with no lists the loop meets no column"
    ),
    (
        "reference/block_manager.py",
        "return state.cached_at_allocate.get(int(seq_id), 0)",
        "0 -> 1",
    ): (
        "under cached_tokens=hits_at_allocate allocate records every new sequence and fork"
        " copies its parent's entry, so the default is never read"
    ),
    ("reference/block_pool.py", "release_clock=state.release_clock + 1,", "1 -> 2"): (
        "release times are only compared with each other (the earliest given back first,"
        " allocation.py) and a step of 2 still makes them rise: no order changes; no view shows"
        " them"
    ),
    (
        "reference/block_pool.py",
        'if view.ref_count == 0 and state.policy.eviction == "free_list":',
        "And -> Or",
    ): (
        "the extra release times go to held blocks (free_list), or to blocks that fall to zero"
        " under the other policies; `released` is read only for blocks nobody holds, whose"
        " time is always that of their last release to zero (set again there, later), and under"
        " lru and release_order only for evictable blocks, which lines below stamp again; no"
        " view shows it"
    ),
    (
        "reference/block_pool.py",
        'if state.policy.common_prefix == "nonempty_runs" and len(runs) > 1:',
        "Gt -> GtE",
    ): (
        "one run filtered is itself, or [[]] when it is empty: the common prefix of one run is"
        " that run either way"
    ),
    ("reference/block_table.py", "missed = True", "True -> False"): (
        "this branch takes the last chunk (a partial one), after which `missed` is never read,"
        " or a full chunk after a miss under lookup=stop_at_first_miss, where it is True already"
    ),
    ("optimized/block_manager.py", "self._window = 0", "0 -> 1"): (
        "_window is read only when there is a null block, which exists only with a sliding"
        " window, and then the next line sets _window to it"
    ),
    ("optimized/block_manager.py", "self._access_stamps = itertools.count(1)", "1 -> 2"): (
        "the manager's pools take access stamps from this counter alone (the manager never"
        " calls the pools' mark_accessed) and compare them with each other and with 0 (never"
        " accessed): stamps from 2 keep every comparison"
    ),
    (
        "optimized/block_manager.py",
        "if len(members) * (num_new + lookahead + 1) <= free:  # most_blocks_touched, inline",
        "LtE -> Lt",
    ): (
        "at equality the exact count runs instead, and each sequence's exact worst case is at"
        " most the bound (specs/accounting.py, _bounded): their sum is at most free, so True"
        " either way"
    ),
    (
        "optimized/block_manager.py",
        "if count + lookahead + 1 > gpu.num_free:  # most_blocks_touched, inline",
        "Gt -> GtE",
    ): (
        "at equality the exact count runs, which is at most the bound (specs/accounting.py,"
        " _bounded), so it is at most the free blocks and nothing is raised either way"
    ),
    ("optimized/block_table.py", "access_stamp: int = 0", "0 -> 1"): (
        "the pending access covers entries num_released .. access_end, empty (access_end 0)"
        " until access() sets the stamp, the time and the end together"
    ),
    ("optimized/block_table.py", "access_end: int = 0", "0 -> 1"): (
        "an entry pending with stamp 0 is never applied: pool.touch and the view apply a pending"
        " access only if its stamp exceeds the block's, and block stamps are never below 0"
    ),
    ("optimized/block_table.py", "if known is None or known[0] < stamp:", "Lt -> LtE"): (
        "two pending accesses never share a stamp: each access() takes a new one from the"
        " manager's counter, and fork does not copy the parent's pending access"
    ),
    (
        "optimized/block_manager.py",
        "if num_full > table.marked:  # else nothing filled since the last mark",
        "Gt -> GtE",
    ): (
        "at num_full == marked, BlockTable.mark_computed starts at max(marked, num_released) >="
        " num_full: it sets nothing and leaves marked as it is"
    ),
    **{
        ("optimized/block_manager.py", source, "Sub -> Add"): (
            "a table's kept answer never holds more than len(blocks) - 1 entries: the mutant"
            " only never takes the shortcut, and computed_prefix gives the same list"
        )
        for source in (
            "if len(known) == len(table.blocks) - 1:",
            "if len(known) != len(table.blocks) - 1:  # else all but the last: nothing to add",
        )
    },
    **{
        ("optimized/block_manager.py", source, mutation): (
            "the loop appends one prefix per id and a single id is answered above it, so here"
            " there are none or at least two prefixes: with none the answer is the empty list"
            " either way, and len(prefixes) is never 1"
        )
        for source, mutation in (
            ("if len(prefixes) <= 1:", "LtE -> Lt"),
            ("return list(prefixes[0]) if prefixes else []", "0 -> 1"),
        )
    },
    **{
        ("optimized/block_manager.py", source, "0 -> 1"): (
            "the group only keeps the last common answer, keyed by the prefixes it was worked"
            " out from: kept on another sequence's group it is as right, just found elsewhere"
        )
        for source in (
            "return list(self._common_prefix(prefixes, self._tables[seq_ids[0]].group))",
            "return list(self._common_prefix(prefixes, tables[0].group))",
        )
    },
    ("optimized/block_manager.py", "if known is not None and known[0] == asked:", "0 -> 1"): (
        "known[1] is the answer, a tuple of ids, never equal to a tuple of two or more prefixes:"
        " the kept answer is only never used, and the answer is worked out again"
    ),
    ("optimized/block_manager.py", "first = prefixes[0]", "0 -> 1"): (
        "the common prefix is a prefix of every list: cut from the second list it holds the"
        " same ids"
    ),
    (
        "optimized/block_manager.py",
        "length = common_length(prefixes, min(len(p) for p in prefixes))",
        "min -> max",
    ): (
        "common_length compares slices: past the shortest list's end the slices differ in"
        " length, so the search finds the same longest common prefix"
    ),
    ("optimized/block_table.py", "if end <= start:", "LtE -> Lt"): (
        "at end == start the loop meets no entry and access_end is set to start, which it is"
    ),
    ("optimized/block_table.py", "if num_out <= self.num_released:", "LtE -> Lt"): (
        "at num_out == num_released no entry is released and num_released stays; only the kept"
        " computed answer is dropped, and worked out again the same"
    ),
    ("optimized/block_table.py", "if self.access_end > index:", "Gt -> GtE"): (
        "at access_end == index, settle(pool, index) returns at once (end <= start)"
    ),
    # --- optimized/defragmenter.py ---
    ("optimized/defragmenter.py", "self._high = -1", "1 -> 2"): (
        "every id is above -1 and -2 alike, so the first _take sets _high; the only other reader,"
        " _max_used, runs only with a used id (num_used > 0), so after a _take"
    ),
    ("optimized/defragmenter.py", "if physical > self._high:", "Gt -> GtE"): (
        "at equality it assigns _high the value it has"
    ),
    ("optimized/defragmenter.py", "if physical < self._low:", "Lt -> LtE"): (
        "at equality it assigns _low the value it has"
    ),
    **{
        (
            "optimized/defragmenter.py",
            "if keep == 0:  # not a pure append: find the common prefix",
            mutation,
        ): (
            "the search only finds a common prefix to leave alone: on a pure append (keep ="
            " len(old)) it finds nothing more (limit <= keep); where it is skipped keep stays 0,"
            " and giving back the whole old table and taking the whole new one leaves the same"
            " ref counts and used count; _high only rises to a used id, and _low only falls to an"
            " id given back (it may be used again: _low bounds the free ids from below only)"
        )
        for mutation in ("0 -> 1", "Eq -> NotEq")
    },
    ("optimized/defragmenter.py", "while high >= 0 and refs[high] == 0:", "GtE -> Gt"): (
        "_max_used runs only with a used id, and none lies above _high: the loop stops at the"
        " highest used id before high >= 0 can fail, and if it comes down to 0, id 0 is that"
        " used id, so stopping there unchecked gives the same high"
    ),
    (
        "optimized/defragmenter.py",
        "while high >= 0 and (refs[high] == 0 or not movable[high]):",
        "GtE -> Gt",
    ): (
        "high stops at 0 instead of -1 only where low (never below 0) is at or above it: the"
        " low loop then does not move and the loop breaks either way, with the same pairs and"
        " the same low"
    ),
    (
        "optimized/defragmenter.py",
        "while low < high and (refs[low] != 0 or not movable[low]):",
        "Lt -> LtE",
    ): (
        "low reaches high only where the high loop stopped on a used movable id: it steps to"
        " high + 1 and the loop breaks as it would have, with the same pairs; _low becomes"
        " high + 1, and still no free movable id lies below it (those below high were passed"
        " as used or reserved, high is used, the ids freed by this call's exchanges lie above"
        " it), and _give_back lowers it when one is freed: only where the next scan starts"
    ),
    # --- optimized/block_table.py ---
    **{
        ("optimized/block_table.py", source, mutation): (
            "the mutant only sends an append the shortcut would take through _fill_blocks: for"
            " tokens that do not fill the block that holds the last ones it calls pool.fill with"
            " no hash, which appends in place when the table is the only holder (as"
            " append_in_place does) and copies when it is not (as the real code then does too);"
            " the pending access is settled from that entry on first, which only writes it"
            " early: pool.touch and the view keep the access with the higher stamp either way"
            " (with no new tokens nothing is filled at all)"
        )
        for source, mutation in (
            ("if position < end:", "Lt -> LtE"),
            ("end < (index + 1) * size", "Add -> Sub"),
            ("end < (index + 1) * size", "Mult -> FloorDiv"),
        )
    },
    ("optimized/block_table.py", "if start < num_full:", "Lt -> LtE"): (
        "at equality set_computed gets an empty slice and marks nothing"
    ),
    ("optimized/block_table.py", "self.marked = max(self.marked, num_full)", "max -> min"): (
        "marked then stays 0, so every mark sets the computed flag of every held full block"
        " again: those below the real marked are computed already (a full block is never"
        " written again, keeps its mark while held, and a swap carries the mark to its copy),"
        " and the manager reads marked only to skip the call"
    ),
    ("optimized/block_table.py", "if run >= end:", "GtE -> Gt"): (
        "at run == end, pool.computed_run(blocks, end, end) returns end, which computed_run is"
    ),
    # --- optimized/block_pool.py ---
    **{
        ("optimized/block_pool.py", source, "0 -> 1"): (
            "a block's start is read only for a block with a hash (the evictor's rank) or a"
            " parent (prefix_of, the view), and _cache sets it with both; _blank clears both"
        )
        for source in ('self._starts = array("q", [0]) * num_blocks', "self._starts[index] = 0")
    },
    **{
        ("optimized/block_pool.py", source, mutation): (
            "the pool's own access stamps (mark_accessed) are never compared with anything:"
            " _access_stamps is read only by touch and by view's untouched accesses, both of"
            " which only the manager's tables use, with stamps from the manager's own counter,"
            " and the manager never calls mark_accessed"
        )
        for source, mutation in (
            ("self._next_access_stamp = 1", "1 -> 2"),
            ("self._next_access_stamp = stamp + 1", "1 -> 2"),
            ("self._next_access_stamp = stamp + 1", "Add -> Sub"),
        )
    },
    **{
        ("optimized/block_pool.py", source, mutation): (
            "a pending pair's stamp is never read (clear_copy_on_writes and view take only the"
            " source): the dict keeps the order of the copies"
        )
        for source, mutation in (
            ("self._next_copy_stamp = 0", "0 -> 1"),
            ("self._next_copy_stamp += 1", "1 -> 2"),
            ("self._next_copy_stamp += 1", "Add= -> Sub="),
            ("self._next_copy_stamp += 1", "delete the augmented assignment"),
        )
    },
    (
        "optimized/block_pool.py",
        "num_hashed = self._starts[index] + self.block_size",
        "Add -> Sub",
    ): (
        "only hashed blocks are ranked, and a hashed block is full: start - block_size instead"
        " of start + block_size shifts every rank by the same constant, so the order stays"
    ),
    (
        "optimized/block_pool.py",
        "for block, tokens in zip(taken, blocks, strict=True):",
        "True -> False",
    ): "taken is built with one block per entry of blocks: zip's strict check can never fire",
    (
        "optimized/block_pool.py",
        "if self._ref_counts[block - self._first_id] > 1:",
        "Gt -> GtE",
    ): "at ref count 1 _copy_if_shared returns the block itself",
    ("optimized/block_pool.py", "if stamp > self._access_stamps[index]:", "Gt -> GtE"): (
        "the stamps compared here come from the manager's counter, one per access() (fork does"
        " not copy a pending access; a pending stamp is never 0): an equal stamp is the same"
        " access with the same time, so applying it again writes (or shows) what is there"
    ),
    # --- optimized/kernels.py ---
    ("optimized/kernels.py", "MAX_RUNS = 4", "4 -> 5"): (
        "MAX_RUNS only picks how the runs are moved: a copy_ per run and tensor, or (more runs)"
        " the gather and scatter on an accelerator, a copy_ per run of the single allocation on"
        " the host; each moves the same blocks, every source read before a destination of the"
        " same tensor is written"
    ),
    **{
        ("optimized/kernels.py", "EXCHANGE_BUFFER_BYTES = 4 * 2**20", mutation): (
            "the bound only picks the pad sizes a batch may use (those that fit, else the"
            " smallest): disjoint exchanges give the same result in any batches, and a batch's"
            " padding repeats its own first pair, which writes the same bytes again"
        )
        for mutation in ("4 -> 5", "2 -> 3", "20 -> 21", "Mult -> FloorDiv")
    },
    **{
        ("optimized/kernels.py", source, mutation): (
            "the test only picks how the runs are moved within one device: by one gather and"
            " one scatter per tensor, or a copy_ per run of the single allocation; each moves"
            " the same blocks, every source read before a destination of the same tensor is"
            " written"
        )
        for source, mutation in (
            ('if len(runs) > MAX_RUNS and src.device.type != "cpu":', "Gt -> GtE"),
            ('if len(runs) > MAX_RUNS and src.device.type != "cpu":', "NotEq -> Eq"),
            ('if len(runs) > MAX_RUNS and src.device.type != "cpu":', "And -> Or"),
        )
    },
    **{
        ("optimized/kernels.py", source, "True -> False"): (
            "both sides of the zip have one entry each per tensor of stores of one layout (or"
            " temps one per staged run): its strict check can never fire"
        )
        for source in (
            "for r, temp in zip(staged, temps, strict=True):",
            "for source, destination in zip(sources, destinations, strict=True):",
        )
    },
    (
        "optimized/kernels.py",
        "accelerator = torch.accelerator.current_accelerator(check_available=True)",
        "True -> False",
    ): (
        "_wait_for is reached only by a copy between two devices, so where an accelerator is"
        " present and available, which both answers then name"
    ),
    (
        "optimized/kernels.py",
        "if accelerator is not None and device.type == accelerator.type:",
        "And -> Or",
    ): (
        "_wait_for is reached only by a copy between the host and an accelerator, and is given"
        " the accelerator's device: accelerator is not None and the types match, so both tests"
        " hold"
    ),
    (
        "optimized/kernels.py",
        "source[r.src : r.src + r.length], non_blocking=True",
        "True -> False",
    ): (
        "a blocking copy moves the same bytes; it only returns later, and the call waits for"
        " the host side at its end anyway"
    ),
    **{
        ("optimized/kernels.py", source, mutation): (
            "it only changes which pad sizes count as fitting the buffer's bound (or, when none"
            " fits, which smallest ones are used): disjoint exchanges give the same result in"
            " any batches, and a batch's padding repeats its own first pair, which writes the"
            " same bytes again"
        )
        for source, mutation in (
            ("row_bytes = rows[0].shape[1] * rows[0].element_size()", "Mult -> FloorDiv"),
            (
                "fitting = [size for size in sizes if 2 * size * row_bytes <="
                " EXCHANGE_BUFFER_BYTES]",
                "2 -> 3",
            ),
            (
                "fitting = [size for size in sizes if 2 * size * row_bytes <="
                " EXCHANGE_BUFFER_BYTES]",
                "Mult -> FloorDiv",
            ),
            (
                "fitting = [size for size in sizes if 2 * size * row_bytes <="
                " EXCHANGE_BUFFER_BYTES]",
                "LtE -> Lt",
            ),
            ("for batch in padded_batches(plan, fitting or sizes[:1]):", "1 -> 2"),
        )
    },
    **{
        (
            "optimized/kernels.py",
            "buffers[size] = rows[0].new_empty((2 * size, rows[0].shape[1]))",
            mutation,
        ): (
            "index_select resizes its out tensor to the 2 * size rows it gathers: a buffer made"
            " with another number of rows is only resized at its first use, and the scatter"
            " reads the gathered rows"
        )
        for mutation in ("2 -> 3", "Mult -> FloorDiv")
    },
    # --- optimized/kv_store.py ---
    **{
        ("optimized/kv_store.py", source, "True -> False"): (
            "write has just checked that keys and values both hold one entry per layer, as"
            " _caches does: zip's strict check can never fire"
        )
        for source in (
            "for layer, (k, v) in enumerate(zip(keys, values, strict=True)):",
            "for (k_cache, v_cache), k, v in zip(self._caches, keys, values, strict=True):",
        )
    },
    ("optimized/kv_store.py", "if v_cache is not None and v is not None:", "And -> Or"): (
        "write has checked that v is None exactly when the store is MLA, which is exactly when"
        " v_cache is None: the two tests never differ"
    ),
}

TWINS: dict[tuple[str, str, str, int], str] = {
    ("optimized/defragmenter.py", "while high >= 0 and refs[high] == 0:", "0 -> 1", 0): (
        "high >= 1: _max_used runs only with a block in use, and _high is never below the highest"
        " used id, so the walk stops at a used id either way (at id 0 too: both tests stop there)"
    ),
    (
        "optimized/defragmenter.py",
        "while high >= 0 and (refs[high] == 0 or not movable[high]):",
        "0 -> 1",
        0,
    ): (
        "high >= 1: stopping at id 0 instead of -1 when id 0 is free or reserved leaves"
        " low >= high (low is never negative), so the loop breaks with the same pairs"
    ),
}
"""Equivalent mutants whose line and mutation a killed twin shares: keyed also by their place
among those twins in the line (0 the first; ``mutate.twin_rank``)."""

HOST_ONLY: dict[tuple[str, str, str], str] = {
    **{
        ("optimized/kernels.py", f"_wait_for({end}.device)", "delete the call"): (
            "on a machine with no accelerator no store lives on another device, so swap_blocks"
            " never copies between devices and never reaches the wait (and _wait_for is a no-op"
            " for host devices); on CUDA test_kernels.py's"
            " test_swap_blocks_returns_only_when_the_host_side_is_done must kill it"
        )
        for end in ("dst", "src")
    },
    **{
        ("optimized/kernels.py", source, mutation): (
            "the gather and scatter runs only on an accelerator (src.device.type != 'cpu'), and"
            " on a machine with none every store is on the host; on one, test_kernels.py's"
            " test_scattered_pairs_on_an_accelerator_and_across_devices must kill it"
        )
        for source, mutation in (
            ("_gather_scatter(src.tensors(), dst.tensors(), plan, src.device)", "delete the call"),
            ("gathered = _row_view(source).index_select(0, src_index)", "0 -> 1"),
            ("_row_view(destination).index_copy_(0, dst_index, gathered)", "0 -> 1"),
            ("_row_view(destination).index_copy_(0, dst_index, gathered)", "delete the call"),
        )
    },
    ("optimized/kernels.py", "if src.device == dst.device:", "Eq -> NotEq"): (
        "on a machine with no accelerator every store is on the host, and the mutant sends a"
        " copy between two of them through the loop meant for two devices: the same runs"
        " copied, then a wait for a host device, a no-op; on one, test_kernels.py's"
        " test_scattered_pairs_on_an_accelerator_and_across_devices must kill it (a copy from"
        " the device to the host past MAX_RUNS runs then scatters onto the host from the"
        " device)"
    ),
}
"""Mutants that only an accelerator can observe: equivalent where there is none, and counted
(killed or a gap) where there is one, so a run on a GPU machine holds them to their test
(``mutate.py`` asks ``mutant_runner.accelerator_present()``)."""
