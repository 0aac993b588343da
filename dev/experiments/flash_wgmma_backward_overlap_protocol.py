"""A model of flash_wgmma_backward_fast.cu's synchronization, run on random interleavings (no GPU).

The fast backward overlaps a tile's elementwise work with products: S^T and dP^T in two wgmma
groups (P^T computed once the first is done), dV += P^T dO issued after a barrier of the
consumer's own warps (kOwnTileBarrier + c), dS^T computed while it runs, and a one-sided barrier
before dQ: the consumer at dQ (tile i % 2) waits at kDsBarrier + itself, the other arrives there
(bar.arrive), syncs its own warps and goes on to its dK. dQ goes out through a shared tile that
TMA's bulk reduction reads. This model plays one block: the producer thread, each consumer's four
warps (one agent each: bar.sync and bar.arrive count a warp's 32 threads), each consumer's wgmma
groups (run in order, each at any time after its four warps issued it, reading its operands
then), the TMA copies (landing at any time) and the bulk reductions (reading the dQ tile at any
time before their wait_group.read), under random interleavings. Named barriers as PTX defines
them: an instance completes when the expected number of threads has arrived or synced, then
starts over; every use of an instance must expect the same count. It checks that every product
reads the tiles of its own query tile (Q, dO, P^T, both dS^T buffers), that TMA reads a whole dQ
tile of its query tile, that nothing deadlocks, and that every tile is done.

    python3 dev/experiments/flash_wgmma_backward_overlap_protocol.py           # the kernel's
    python3 dev/experiments/flash_wgmma_backward_overlap_protocol.py --mutant  # the planted bug
        ds_barrier_arrival_at_the_wrong_id: must deadlock
    python3 dev/experiments/flash_wgmma_backward_overlap_protocol.py --one-id  # one barrier id for
        both consumers at dQ: a consumer a tile ahead may count into the tile before's barrier

Delete it once the fast reference has passed its checker and planted bugs on a Hopper GPU.
"""
import random
import sys

WARPS = 4  # per consumer warpgroup


class Mbarrier:
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


class NamedBarriers:
    """bar.sync / bar.arrive: ids 1..15, counts in warps."""

    def __init__(self):
        self.count, self.expected, self.generation = {}, {}, {}

    def arrive(self, bar, warps):
        expected = self.expected.setdefault(bar, warps)
        assert expected == warps, f"barrier {bar} used with {expected} and {warps} warps at once"
        self.count[bar] = self.count.get(bar, 0) + 1
        generation = self.generation.get(bar, 0)
        if self.count[bar] == warps:
            self.count[bar] = 0
            del self.expected[bar]
            self.generation[bar] = generation + 1
        return generation

    def passed(self, bar, generation):
        return self.generation.get(bar, 0) > generation


def run(tiles, stages, dq_tiles, rng, wrong_arrival=False, one_id=False):
    """One block over `tiles` query tiles under one random interleaving; returns the log of
    problems (empty when the protocol holds)."""
    DS, OWN = 1, 3
    full = [Mbarrier(1) for _ in range(stages)]
    empty = [Mbarrier(2 * WARPS) for _ in range(stages)]
    bars = NamedBarriers()
    stage_tile = [None] * stages                       # which query tile a stage holds
    p_tile = [[None] * WARPS for _ in range(2)]        # P^T of consumer c: each warp's rows
    ds_tile = [[[None] * WARPS for _ in range(2)] for _ in range(2)]  # [buffer][consumer][warp]
    dq_tile = [[None] * WARPS for _ in range(dq_tiles)]
    problems, done = [], [set(), set()]
    # Per consumer: the groups issued (a list of [warps issued, reads, done]) and its bulk
    # reductions in flight (the dQ tile and the query tile each must read).
    groups = [[], []]
    bulk = [[], []]
    agents = []

    def expect(what, got, want):
        if got != want:
            problems.append(f"{what}: read {got}, expected query tile {want}")

    def producer():
        for i in range(tiles):
            stage = i % stages
            while not empty[stage].passed(i // stages % 2 ^ 1):
                yield
            full[stage].arrive(tx=1)

            def land(stage=stage, i=i):
                yield
                stage_tile[stage] = i
                full[stage].land()
            agents.append(land())
            yield

    def issue(c, w, key, reads):
        """Warp w's part of consumer c's group `key`: the group runs once all four issued it."""
        for group in groups[c]:
            if group["key"] == key:
                group["issued"] += 1
                return group
        group = {"key": key, "issued": 1, "reads": reads, "done": False}
        groups[c].append(group)

        def execute(group=group, c=c):
            while group["issued"] < WARPS or any(not g["done"] for g in groups[c]
                                                 [:groups[c].index(group)]):
                yield
            group["reads"]()
            group["done"] = True
        agents.append(execute())
        return group

    def wait_groups(c, key_prefix, pending):
        mine = [g for g in groups[c] if g["key"][0] == key_prefix]
        return sum(not g["done"] for g in mine) <= pending

    def warp(c, w):
        for i in range(tiles):
            stage, buffer, dq_consumer = i % stages, i % 2, i % 2
            dq_here = dq_consumer == c
            while not full[stage].passed(i // stages % 2):
                yield
            issue(c, w, (i, "S"), lambda s=stage, i=i: expect("S^T's Q", stage_tile[s], i))
            issue(c, w, (i, "dP"), lambda s=stage, i=i: expect("dP^T's dO", stage_tile[s], i))
            yield
            while not wait_groups(c, i, 1):  # S^T done
                yield
            p_tile[c][w] = i
            yield
            generation = bars.arrive(OWN + c, WARPS)
            while not bars.passed(OWN + c, generation):
                yield

            def dv_reads(c=c, s=stage, i=i):
                expect("dV's dO", stage_tile[s], i)
                for part in p_tile[c]:
                    expect(f"dV's P^T (consumer {c})", part, i)
            issue(c, w, (i, "dV"), dv_reads)
            yield
            while not wait_groups(c, i, 1):  # dP^T done
                yield
            ds_tile[buffer][c][w] = i
            yield
            if w == 0 and (dq_tiles == 1 or dq_here):
                while bulk[c]:  # cp.async.bulk.wait_group.read 0
                    yield
            ds_bar = DS if one_id else DS + dq_consumer
            if dq_here:
                generation = bars.arrive(ds_bar, 2 * WARPS)
                while not bars.passed(ds_bar, generation):
                    yield
            else:
                bars.arrive(DS + (1 - dq_consumer) if wrong_arrival else ds_bar, 2 * WARPS)
                yield
                generation = bars.arrive(OWN + c, WARPS)
                while not bars.passed(OWN + c, generation):
                    yield

            def dk_reads(c=c, s=stage, b=buffer, i=i):
                expect("dK's Q", stage_tile[s], i)
                for part in ds_tile[b][c]:
                    expect(f"dK's dS^T (consumer {c})", part, i)
            issue(c, w, (i, "dK"), dk_reads)
            yield
            if dq_here:
                def dq_reads(b=buffer, i=i):
                    for other in range(2):
                        for part in ds_tile[b][other]:
                            expect(f"dQ's dS^T (consumer {other})", part, i)
                issue(c, w, (i, "dQ"), dq_reads)
                yield
            while not wait_groups(c, i, 0):
                yield
            empty[stage].arrive()
            yield
            if not dq_here:
                done[c].add(i)
                continue
            tile = dq_tile[i % dq_tiles]
            tile[w] = i
            yield
            generation = bars.arrive(OWN + c, WARPS)
            while not bars.passed(OWN + c, generation):
                yield
            if w == 0:
                reduction = {"tile": i % dq_tiles, "query_tile": i}
                bulk[c].append(reduction)

                def tma_read(c=c, reduction=reduction):
                    yield
                    for part in dq_tile[reduction["tile"]]:
                        expect("TMA's read of the dQ tile", part, reduction["query_tile"])
                    bulk[c].remove(reduction)
                agents.append(tma_read())
            done[c].add(i)
            yield

    agents.append(producer())
    for c in range(2):
        for w in range(WARPS):
            agents.append(warp(c, w))
    stalled = 0
    while agents:
        agent = rng.choice(agents)
        try:
            next(agent)
        except StopIteration:
            agents.remove(agent)
            stalled = 0
            continue
        stalled += 1
        if stalled > 20000:
            problems.append(f"deadlock: tiles done {sorted(done[0])} / {sorted(done[1])}")
            break
    if not problems and any(done[c] != set(range(tiles)) for c in range(2)):
        problems.append("not every tile done")
    return problems


def main():
    wrong_arrival = "--mutant" in sys.argv
    one_id = "--one-id" in sys.argv
    rng = random.Random(34)
    runs, failures = 0, {}
    for tiles in (1, 2, 3, 5, 8):
        for stages, dq_tiles in ((2, 1), (3, 2)):  # D 128, D 64
            for _ in range(40):
                runs += 1
                for problem in run(tiles, stages, dq_tiles, rng, wrong_arrival, one_id):
                    failures.setdefault(problem.split(":")[0], problem)
    print(f"{runs} interleavings; {len(failures)} kinds of problem")
    for problem in failures.values():
        print("  " + problem)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
