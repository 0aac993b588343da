"""A model of flash_wgmma_fast.cu's synchronization, run on random interleavings (no GPU).

The persistent kernel's producer runs ahead across work items: Q is reloaded once every consumer's
last S of an item has read it (q_empty), and the ring of K/V stages goes on from one item's tiles
to the next's, stage and parity counted over all items. A block's first item is blockIdx.x, the
next ones come from a counter shared by the blocks (atomicAdd), handed to the consumers in shared
memory (round_item) with the Q tile's barrier; an item past the end tells them to leave.

Each consumer pipelines its products: in one turn it issues tile j's S = Q K^T and tile j - 1's
O += P V (P from registers), each its own wgmma group; it waits until one group is left (S done),
runs the softmax, waits for none (P V done), releases tile j - 1's stage, rescales O and packs the
new P over the old one. The item's last P V follows the loop. The consumers (two, or three at D 64
not causal) take turns at issuing, in a ring: named barriers (bar.sync at its own, bar.arrive at
the next one's, 256 threads: a phase completes when both warpgroups are in), the last consumer
handing consumer 0 the first turn, consumer 0 taking the last one handed over after its items.
A consumer whose rows of an item all lie past T (the last query tile's) computes nothing: for
each tile it waits for the stage to land, takes and hands over its turn and releases the stage,
then releases Q and takes the turn of the item's last P V.

The model plays every block's producer thread, its consumer warpgroups (one agent each: an arrive
counts for the warpgroup's 128 threads), each consumer's wgmma groups (they run in order, each
reading its operands at a random time before it completes) and the TMA copies (landing in any
order, at any time), with mbarriers as PTX defines them (a phase completes when its arrivals and
its transaction bytes are in; try_wait.parity p passes once the phase of parity p has completed).
It checks that every S reads its item's Q and its tile's K, every P V its tile's V and P, that
the softmax reads a finished S and the rescale an O no P V is writing, that the turns go round,
that no named barrier is left half-arrived at exit, that nothing deadlocks, and that every item is
done exactly once.

    python3 dev/experiments/flash_wgmma_persistent_protocol.py           # the kernel's protocol
    python3 dev/experiments/flash_wgmma_persistent_protocol.py MUTANT    # must fail, MUTANT one of
        q_tile_released_after_the_first_scores   (mutants.toml: Q overwritten under later S)
        turn_handed_to_itself                    (mutants.toml: bar.arrive's id; a hang)
        first_turn_never_handed_over             (a hang)
        output_reads_this_tiles_V                (mutants.toml: P V of the wrong stage)
        scores_wait_count_off_by_one             (wait_group 2: softmax reads S in flight)
        output_wait_count_off_by_one             (wait_group 1: O rescaled under P V)
        stage_released_before_its_output_wait    (V overwritten under P V)
        stage_released_by_two_consumers          (mutants.toml: empty's count two warpgroups;
                                                  with three consumers V or K overwritten)
        idle_consumer_skips_the_last_turn        (a consumer with no rows past T: a hang)
        idle_consumer_releases_before_landing    (its release counts into the stage's
                                                  previous pass without the turns)
Delete it once the fast reference has passed its checker and planted bugs on a Hopper GPU.
"""
import random
import sys

WAIT = "wait"  # what an agent yields while it spins on a barrier


class Barrier:
    def __init__(self, arrivals):
        self.arrivals, self.pending, self.tx, self.phase = arrivals, arrivals, 0, 0

    def arrive(self, tx=0):
        self.pending -= 1
        self.tx += tx
        assert self.pending >= 0, "more arrivals than the phase expects"
        self._complete()

    def land(self):
        self.tx -= 1
        self._complete()

    def _complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.arrivals

    def passed(self, parity):
        return self.phase % 2 != parity


class NamedBarrier:
    """bar.sync / bar.arrive with a count of two consumer warpgroups (one waits, one arrives)."""

    def __init__(self):
        self.count, self.phase = 0, 0

    def arrive(self):
        self.count += 1
        if self.count == 2:
            self.count, self.phase = 0, self.phase + 1

    def sync(self):
        phase = self.phase
        self.arrive()
        while self.phase == phase:
            yield WAIT


class Warpgroup:
    """A consumer's wgmma groups in flight and its registers: S's accumulators (the tile whose
    scores they hold, None while a wgmma writes them) and P's (the tile whose P they hold)."""

    def __init__(self):
        self.queue, self.regs = [], {"s": None, "p": None}


def launch(grid, tiles, active, stages, consumers, turns_on, rng, mutant):
    """One launch of `grid` blocks of `consumers` consumer warpgroups over the items (their
    key-tile counts, and how many consumers have rows before T: the others compute nothing) under
    one random interleaving of every agent, with or without the turns (kPingPong); returns the
    items done, in the order they were finished."""
    items, counter, done, agents, in_flight, groups = len(tiles), [0], [], [], [], []

    def make_block(b):
        q_full, q_empty = Barrier(1), Barrier(consumers)
        full = [Barrier(1) for _ in range(stages)]
        empty = [Barrier(2 if mutant == "stage_released_by_two_consumers" else consumers)
                 for _ in range(stages)]
        q_tile, ring, round_item = [None], [None] * stages, [None]
        turns, order = [NamedBarrier() for _ in range(consumers)], []

        def producer():
            issued, item, r = 0, b, 0
            while True:
                while not q_empty.passed((r % 2) ^ 1):
                    yield WAIT
                round_item[0] = item
                if item >= items:
                    q_full.arrive()
                    return
                q_full.arrive(tx=1)
                in_flight.append((q_tile, 0, item, q_full))
                nxt = grid + counter[0]  # atomicAdd: one step, no other agent in between
                counter[0] += 1
                yield
                for tile in range(tiles[item]):
                    stage = issued % stages
                    while not empty[stage].passed((issued // stages % 2) ^ 1):
                        yield WAIT
                    full[stage].arrive(tx=1)
                    in_flight.append((ring, stage, (item, tile), full[stage]))
                    issued += 1
                item, r = nxt, r + 1

        def consumer(c):
            # This consumer's committed wgmma groups, oldest first: each the operands it reads
            # (what, read it now, expected) and the accumulators it writes when it completes.
            warpgroup = Warpgroup()
            queue, regs = warpgroup.queue, warpgroup.regs
            groups.append(warpgroup)

            def issue(reads, writes):
                queue.append((reads, writes))

            def wait_groups(left):
                while len(queue) > left:
                    yield WAIT

            def take_turn():
                if turns_on:
                    yield from turns[c].sync()
                    order.append(c)

            def hand_over():
                if turns_on:
                    turns[c if mutant == "turn_handed_to_itself" else (c + 1) % consumers].arrive()

            if c == consumers - 1 and mutant != "first_turn_never_handed_over":
                hand_over()
            used, r = 0, 0
            while True:
                while not q_full.passed(r % 2):
                    yield WAIT
                item = round_item[0]
                if item >= items:
                    break
                previous = None
                n = tiles[item]
                if c >= active[item]:  # no row before T: turns and releases only
                    for tile in range(n):
                        stage = used % stages
                        while (mutant != "idle_consumer_releases_before_landing" and
                               not full[stage].passed(used // stages % 2)):
                            yield WAIT
                        yield from take_turn()
                        hand_over()
                        empty[stage].arrive()
                        used += 1
                        yield
                    q_empty.arrive()
                    if mutant != "idle_consumer_skips_the_last_turn":
                        yield from take_turn()
                        hand_over()
                    r += 1
                    continue
                for tile in range(n):
                    stage = used % stages
                    while not full[stage].passed(used // stages % 2):
                        yield WAIT
                    yield from take_turn()
                    regs["s"] = None  # S's accumulators now belong to the wgmma
                    issue([("Q", lambda: q_tile[0], item),
                           ("K", lambda s=stage: ring[s], (item, tile))], ("s", (item, tile)))
                    if tile > 0:
                        v = stage if mutant == "output_reads_this_tiles_V" else previous
                        issue([("V", lambda s=v: ring[s], (item, tile - 1)),
                               ("P", lambda: regs["p"], (item, tile - 1))], None)
                        hand_over()
                        yield from wait_groups(2 if mutant == "scores_wait_count_off_by_one"
                                               else 1)
                    else:
                        hand_over()
                        yield from wait_groups(0)
                    assert regs["s"] == (item, tile), "the softmax read S before its wgmma completed"
                    release = 0 if mutant == "q_tile_released_after_the_first_scores" else n - 1
                    if tile == release:
                        q_empty.arrive()
                    yield  # the softmax
                    if mutant == "stage_released_before_its_output_wait" and tile > 0:
                        empty[previous].arrive()
                    yield from wait_groups(1 if mutant == "output_wait_count_off_by_one" else 0)
                    if tile > 0 and mutant != "stage_released_before_its_output_wait":
                        empty[previous].arrive()
                    assert not queue, "O rescaled (and P packed) while a P V still runs"
                    regs["p"] = (item, tile)
                    previous, used = stage, used + 1
                yield from take_turn()
                issue([("V", lambda s=previous: ring[s], (item, n - 1)),
                       ("P", lambda: regs["p"], (item, n - 1))], None)
                hand_over()
                yield from wait_groups(0)
                empty[previous].arrive()
                if c == 0:
                    done.append(item)
                yield
                r += 1
            if c == 0:
                yield from take_turn()

        def finish():
            # The turns go round (consumer 0 first) and every named barrier ends empty.
            if turns_on:
                assert order == [i % consumers for i in range(len(order))], \
                    "the turns did not go round"
            assert all(t.count == 0 for t in turns), "a named barrier left half-arrived at exit"

        return [producer()] + [consumer(c) for c in range(consumers)], finish

    finishes = []
    for b in range(grid):
        block, finish = make_block(b)
        agents += block
        finishes.append(finish)
    idle = 0
    while agents or in_flight:
        pending = [w for w in groups if w.queue]
        k = rng.randrange(len(agents) + bool(in_flight) + bool(pending))
        if k < len(agents):
            try:
                idle = idle + 1 if next(agents[k]) == WAIT else 0
            except StopIteration:
                agents.pop(k)
                idle = 0
        elif in_flight and k == len(agents):
            buffer, slot, value, barrier = in_flight.pop(rng.randrange(len(in_flight)))
            buffer[slot] = value
            barrier.land()
            idle = 0
        else:
            warpgroup = rng.choice(pending)  # a consumer's oldest group reads, completes
            reads, writes = warpgroup.queue.pop(0)
            for what, read, expected in reads:
                assert read() == expected, f"a wgmma read {what} of {read()} for {expected}"
            if writes:
                name, value = writes
                warpgroup.regs[name] = value
            idle = 0
        assert idle < 20000, "deadlock"
    for finish in finishes:
        finish()
    return done


def main():
    mutant = sys.argv[1] if len(sys.argv) > 1 else None
    runs = 0
    # (query tiles, heads, causal, SMs, stages, consumers, consumers with rows before T in the last
    # query tile, turns): the trainer's shape last, small grids for long blocks; 2 stages (the
    # fewest the ring allows) and the kernel's 3 and 4 (5 a sweep's); three consumers as at D 64
    # not causal (and causal, a sweep's); the last query tile partly past T (T 4096 in tiles of
    # 192 rows: one consumer's rows), and kPingPong = false.
    for q_tiles, heads, causal, sms, stages, consumers, last_active, turns_on in [
            (8, 12, True, 13, 3, 2, 2, True), (8, 12, True, 7, 4, 2, 1, True),
            (3, 5, False, 4, 2, 2, 1, True), (1, 9, True, 9, 3, 2, 1, True),
            (4, 3, True, 20, 2, 2, 2, True), (6, 8, False, 5, 4, 3, 1, True),
            (3, 5, False, 4, 2, 3, 2, True), (6, 4, True, 7, 5, 3, 1, True),
            (4, 5, False, 3, 4, 3, 1, False), (8, 192, True, 132, 4, 2, 2, True)]:
        # Item i: query tile q_tiles - 1 - i // heads when causal (heaviest first), its key tiles.
        q_tile = [(q_tiles - 1 - i // heads if causal else i // heads)
                  for i in range(q_tiles * heads)]
        tiles = [(q + 1 if causal else q_tiles) for q in q_tile]
        active = [(last_active if q == q_tiles - 1 else consumers) for q in q_tile]
        grid = min(sms, len(tiles))
        for seed in range(20 if len(tiles) < 500 else 1):
            done = launch(grid, tiles, active, stages, consumers, turns_on, random.Random(seed),
                          mutant)
            assert sorted(done) == list(range(len(tiles))), "an item missed or done twice"
            runs += 1
    print(f"ok: {runs} random interleavings, every product read its own operands, the turns "
          "went round, no deadlock")


if __name__ == "__main__":
    main()
