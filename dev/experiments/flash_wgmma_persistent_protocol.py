"""A model of flash_wgmma_fast.cu's barrier protocol, run on random interleavings (no GPU).

The persistent kernel's producer runs ahead across work items: Q is reloaded once both consumers'
last S of an item has read it (q_empty), and the ring of K/V stages goes on from one item's tiles
to the next's, stage and parity counted over all items. This model plays the producer thread, the
two consumer warpgroups (one agent each: an arrive counts for the warpgroup's 128 threads) and the
TMA copies (landing in any order, at any time) in random orders, with mbarriers as PTX defines
them (a phase completes when its arrivals and its transaction bytes are in; try_wait.parity p
passes once the phase of parity p has completed), and checks that every S reads the item's Q and
the tile's K, every P V the tile's V, that nothing deadlocks and that every item ends.

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


def block(b, grid, tiles, rng, release_after_first):
    """One block's items (work_item's snake) under one random interleaving; returns items done."""
    def work_item(r):
        return r * grid + (b if r % 2 == 0 else grid - 1 - b)

    q_full, q_empty = Barrier(1), Barrier(2)
    full = [Barrier(1) for _ in range(STAGES)]
    empty = [Barrier(2) for _ in range(STAGES)]
    q_tile, stages, in_flight, done = [None], [None] * STAGES, [], []

    def producer():
        issued, r = 0, 0
        while work_item(r) < len(tiles):
            item = work_item(r)
            while not q_empty.passed((r % 2) ^ 1):
                yield
            q_full.arrive(tx=1)
            in_flight.append((None, item, q_full))
            for tile in range(tiles[item]):
                stage = issued % STAGES
                while not empty[stage].passed((issued // STAGES % 2) ^ 1):
                    yield
                full[stage].arrive(tx=1)
                in_flight.append((stage, (item, tile), full[stage]))
                issued += 1
            r += 1

    def consumer():
        used, r = 0, 0
        while work_item(r) < len(tiles):
            item = work_item(r)
            while not q_full.passed(r % 2):
                yield
            for tile in range(tiles[item]):
                stage = used % STAGES
                while not full[stage].passed(used // STAGES % 2):
                    yield
                assert q_tile[0] == item, f"S read item {q_tile[0]}'s Q for item {item}"
                assert stages[stage] == (item, tile), f"S read {stages[stage]}, not {item, tile}"
                yield
                if tile == (0 if release_after_first else tiles[item] - 1):
                    q_empty.arrive()
                yield
                assert stages[stage] == (item, tile), f"P V read {stages[stage]}"
                empty[stage].arrive()
                used += 1
            done.append(item)
            yield
            r += 1

    agents = [producer(), consumer(), consumer()]
    for _ in range(10**6):
        if not agents and not in_flight:
            return len(done) // 2
        k = rng.randrange(len(agents) + bool(in_flight))
        if k < len(agents):
            try:
                next(agents[k])
            except StopIteration:
                agents.pop(k)
        else:
            stage, value, barrier = in_flight.pop(rng.randrange(len(in_flight)))
            if stage is None:
                q_tile[0] = value
            else:
                stages[stage] = value
            barrier.land()
    raise AssertionError("deadlock")


def main():
    mutant = "--mutant" in sys.argv
    runs = 0
    # (query tiles, heads, causal, SMs): the trainer's shape last, small grids for long blocks.
    for q_tiles, heads, causal, sms in [(8, 12, True, 13), (8, 12, True, 7), (3, 5, False, 4),
                                        (1, 9, True, 9), (4, 3, True, 20), (8, 192, True, 132)]:
        # Item i: query tile q_tiles - 1 - i // heads when causal (heaviest first), its key tiles.
        tiles = [(q_tiles - i // heads if causal else q_tiles) for i in range(q_tiles * heads)]
        grid = min(sms, len(tiles))
        for seed in range(20 if len(tiles) < 500 else 2):
            rng = random.Random(seed)
            items = sum(block(b, grid, tiles, rng, mutant) for b in range(grid))
            assert items == len(tiles), f"{items} of {len(tiles)} items done"
            runs += 1
    print(f"ok: {runs} random interleavings, every S and P V read its own tiles, no deadlock")


if __name__ == "__main__":
    main()
