"""A model of flash_wgmma_fast.cu's barrier protocol, run on random interleavings (no GPU).

The persistent kernel's producer runs ahead across work items: Q is reloaded once both consumers'
last S of an item has read it (q_empty), and the ring of K/V stages goes on from one item's tiles
to the next's, stage and parity counted over all items. A block's first item is blockIdx.x, the
next ones come from a counter shared by the blocks (atomicAdd), handed to the consumers in shared
memory (round_item) with the Q tile's barrier; an item past the end tells them to leave. This
model plays every block's producer thread and two consumer warpgroups (one agent each: an arrive
counts for the warpgroup's 128 threads) and the TMA copies (landing in any order, at any time) in
random orders, with mbarriers as PTX defines them (a phase completes when its arrivals and its
transaction bytes are in; try_wait.parity p passes once the phase of parity p has completed), and
checks that every S reads its item's Q and its tile's K, every P V its tile's V, that nothing
deadlocks, and that every item is done exactly once.

    python3 dev/experiments/flash_wgmma_persistent_protocol.py          # the kernel's protocol
    python3 dev/experiments/flash_wgmma_persistent_protocol.py --mutant # Q released after the
                                                                        # first S: must fail
Delete it once the fast reference has passed its checker and planted bugs on a Hopper GPU.
"""
import random
import sys

STAGES = 2


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


def launch(grid, tiles, rng, release_after_first):
    """One launch of `grid` blocks over the items (their key-tile counts) under one random
    interleaving of every agent; returns the items done, in the order they were finished."""
    items, counter, done, agents, in_flight = len(tiles), [0], [], [], []

    def make_block(b):
        q_full, q_empty = Barrier(1), Barrier(2)
        full = [Barrier(1) for _ in range(STAGES)]
        empty = [Barrier(2) for _ in range(STAGES)]
        q_tile, stages, round_item = [None], [None] * STAGES, [None]

        def producer():
            issued, item, r = 0, b, 0
            while True:
                while not q_empty.passed((r % 2) ^ 1):
                    yield
                round_item[0] = item
                if item >= items:
                    q_full.arrive()
                    return
                q_full.arrive(tx=1)
                in_flight.append((q_tile, None, item, q_full))
                nxt = grid + counter[0]  # atomicAdd: one step, no other agent in between
                counter[0] += 1
                yield
                for tile in range(tiles[item]):
                    stage = issued % STAGES
                    while not empty[stage].passed((issued // STAGES % 2) ^ 1):
                        yield
                    full[stage].arrive(tx=1)
                    in_flight.append((stages, stage, (item, tile), full[stage]))
                    issued += 1
                item, r = nxt, r + 1

        def consumer(c):
            used, r = 0, 0
            while True:
                while not q_full.passed(r % 2):
                    yield
                item = round_item[0]
                if item >= items:
                    return
                for tile in range(tiles[item]):
                    stage = used % STAGES
                    while not full[stage].passed(used // STAGES % 2):
                        yield
                    assert q_tile[0] == item, f"S read item {q_tile[0]}'s Q for item {item}"
                    assert stages[stage] == (item, tile), f"S read {stages[stage]}"
                    yield
                    if tile == (0 if release_after_first else tiles[item] - 1):
                        q_empty.arrive()
                    yield
                    assert stages[stage] == (item, tile), f"P V read {stages[stage]}"
                    empty[stage].arrive()
                    used += 1
                if c == 0:
                    done.append(item)
                yield
                r += 1

        return [producer(), consumer(0), consumer(1)]

    for b in range(grid):
        agents += make_block(b)
    for _ in range(10**7):
        if not agents and not in_flight:
            return done
        k = rng.randrange(len(agents) + bool(in_flight))
        if k < len(agents):
            try:
                next(agents[k])
            except StopIteration:
                agents.pop(k)
        else:
            buffer, slot, value, barrier = in_flight.pop(rng.randrange(len(in_flight)))
            buffer[0 if slot is None else slot] = value
            barrier.land()
    raise AssertionError("deadlock")


def main():
    mutant = "--mutant" in sys.argv  # the planted bug q_tile_released_after_the_first_scores
    runs = 0
    # (query tiles, heads, causal, SMs): the trainer's shape last, small grids for long blocks.
    for q_tiles, heads, causal, sms in [(8, 12, True, 13), (8, 12, True, 7), (3, 5, False, 4),
                                        (1, 9, True, 9), (4, 3, True, 20), (8, 192, True, 132)]:
        # Item i: query tile q_tiles - 1 - i // heads when causal (heaviest first), its key tiles.
        tiles = [(q_tiles - i // heads if causal else q_tiles) for i in range(q_tiles * heads)]
        grid = min(sms, len(tiles))
        for seed in range(20 if len(tiles) < 500 else 2):
            done = launch(grid, tiles, random.Random(seed), mutant)
            assert sorted(done) == list(range(len(tiles))), "an item missed or done twice"
            runs += 1
    print(f"ok: {runs} random interleavings, every S and P V read its own tiles, no deadlock")


if __name__ == "__main__":
    main()
