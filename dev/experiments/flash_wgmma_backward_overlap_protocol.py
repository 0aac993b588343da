"""A model of flash_wgmma_backward_fast.cu's synchronization, run on random interleavings (no GPU).

The fast backward overlaps a tile's elementwise work with products: S^T and dP^T in two wgmma
groups (P^T computed once the first is done), dV += P^T dO issued after a barrier of the
consumer's own warps (kOwnTileBarrier + c), dS^T computed while it runs, and a one-sided barrier
before dQ: the consumer at dQ (tile i % 2) waits at kDsBarrier + itself, the other arrives there
(bar.arrive), syncs its own warps and goes on to its dK. dQ goes out through a shared tile that
TMA's bulk reduction reads. And it is persistent: a block loops over (key block, head) items,
its producer takes each next item from a counter in global memory (the launcher zeroes it before
each call), publishes it in shared memory with the K/V buffer's kv_full barrier, loads its K and
V into buffer r % kKvBuffers once both consumers released that buffer's item before (kv_empty),
and streams its Q/dO tiles on through the ring, whose stage and parity, like the consumers' dS^T
buffer and turn at dQ, count the query tiles over all items. This model plays a few blocks of two
calls, one after the other: each block's producer thread, each consumer's four warps (one agent
each: bar.sync and bar.arrive count a warp's 32 threads), each consumer's wgmma groups (run in
order, each at any time after its four warps issued it, reading its operands then), the TMA
copies (landing at any time) and the bulk reductions (reading the dQ tile at any time before
their wait_group.read), under random interleavings. Named barriers as PTX defines them: an
instance completes when the expected number of threads has arrived or synced, then starts over;
every use of an instance must expect the same count. It checks that every product reads the
tiles of its own item and query tile (K, V, Q, dO, P^T, both dS^T buffers), that TMA reads a
whole dQ tile of its query tile, that nothing deadlocks, and that each call does every item once.

    python3 dev/experiments/flash_wgmma_backward_overlap_protocol.py           # the kernel's
    python3 dev/experiments/flash_wgmma_backward_overlap_protocol.py MUTANT    # a planted bug:
        ds_barrier_arrival_at_the_wrong_id, kv_empty_phase_off_by_one: deadlock;
        item_taken_twice: an item done twice; item_counter_not_zeroed_between_calls: the second
        call misses items
    python3 dev/experiments/flash_wgmma_backward_overlap_protocol.py --one-id  # one barrier id for
        both consumers at dQ: a consumer a tile ahead may count into the tile before's barrier

Delete it once the fast reference has passed its checker and planted bugs on a Hopper GPU.
"""
import random
import sys

# The forward's model, beside this file, has the mbarrier (its arrivals, transaction bytes, phase).
from flash_wgmma_persistent_protocol import Barrier as Mbarrier

WARPS = 4  # per consumer warpgroup


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


def run(item_tiles, blocks, stages, dq_tiles, kv_buffers, rng, mutant="", one_id=False,
        calls=1):
    """`calls` calls, one after another, each of `blocks` persistent blocks over the items
    (item_tiles[n]: item n's query tiles) under one random interleaving; returns the log of
    problems (empty when the protocol holds)."""
    problems = []
    counter = [0]  # the items taken after the blocks' first ones (global memory)
    for call in range(calls):
        if mutant != "item_counter_not_zeroed_between_calls":
            counter[0] = 0  # the launcher's cudaMemsetAsync
        done = [[], []]  # items finished by each consumer, over all blocks
        agents = []
        for block in range(min(blocks, len(item_tiles))):
            build_block(block, min(blocks, len(item_tiles)), item_tiles, stages, dq_tiles,
                        kv_buffers, agents, counter, done, problems, mutant, one_id)
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
                problems.append(f"deadlock (call {call}): items done {sorted(done[0])} / "
                                f"{sorted(done[1])}")
                return problems
        for c in range(2):
            if sorted(done[c]) != list(range(len(item_tiles))):
                problems.append(f"items not each done once (call {call}): consumer {c} did "
                                f"{sorted(done[c])} of {len(item_tiles)}")
    return problems


def build_block(block, grid, item_tiles, stages, dq_tiles, kv_buffers, agents, counter, done,
                problems, mutant, one_id):
    """One persistent block's agents: its producer, each consumer's four warps, and what they
    start (copies, wgmma groups, bulk reductions)."""
    DS, OWN = 1, 3
    items = len(item_tiles)
    full = [Mbarrier(1) for _ in range(stages)]
    empty = [Mbarrier(2 * WARPS) for _ in range(stages)]
    kv_full = [Mbarrier(1) for _ in range(kv_buffers)]
    kv_empty = [Mbarrier(2 * WARPS) for _ in range(kv_buffers)]
    item_of = [None] * kv_buffers                     # shared memory: the buffer's item
    kv_item = [None] * kv_buffers                     # which item's K and V a buffer holds
    bars = NamedBarriers()
    stage_tile = [None] * stages                      # which (item, query tile) a stage holds
    p_tile = [[None] * WARPS for _ in range(2)]       # P^T of consumer c: each warp's rows
    ds_tile = [[[None] * WARPS for _ in range(2)] for _ in range(2)]  # [buffer][consumer][warp]
    dq_tile = [[None] * WARPS for _ in range(dq_tiles)]
    # Per consumer: the groups issued (dicts: warps issued, reads, done) and its bulk reductions
    # in flight (the dQ tile and the query tile each must read).
    groups = [[], []]
    bulk = [[], []]

    def expect(what, got, want):
        if got != want:
            problems.append(f"{what}: read {got}, expected {want}")

    def producer():
        issued, item, round_ = 0, block, 0
        while True:
            kv = round_ % kv_buffers
            phase = round_ // kv_buffers % 2
            if mutant != "kv_empty_phase_off_by_one":
                phase ^= 1
            while not kv_empty[kv].passed(phase):
                yield
            item_of[kv] = item
            if item >= items:
                kv_full[kv].arrive()
                return
            kv_full[kv].arrive(tx=1)

            def land_kv(kv=kv, item=item):
                yield
                kv_item[kv] = item
                kv_full[kv].land()
            agents.append(land_kv())
            yield
            taken = counter[0]  # atomicAdd
            counter[0] += 1
            next_item = grid + taken - (1 if mutant == "item_taken_twice" else 0)
            yield
            for tile in range(item_tiles[item]):
                stage = issued % stages
                while not empty[stage].passed(issued // stages % 2 ^ 1):
                    yield
                full[stage].arrive(tx=1)

                def land(stage=stage, tile=(item, tile)):
                    yield
                    stage_tile[stage] = tile
                    full[stage].land()
                agents.append(land())
                issued += 1
                yield
            item = next_item
            round_ += 1

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

    def wait_groups(c, i, pending):
        mine = [g for g in groups[c] if g["key"][0] == i]
        return sum(not g["done"] for g in mine) <= pending

    def warp(c, w):
        i, round_ = 0, 0  # query tiles over all items; items
        while True:
            kv = round_ % kv_buffers
            while not kv_full[kv].passed(round_ // kv_buffers % 2):
                yield
            item = item_of[kv]
            if item >= items:
                return
            for tile in range(item_tiles[item]):
                here = (item, tile)
                stage, buffer, dq_consumer = i % stages, i % 2, i % 2
                dq_here = dq_consumer == c
                while not full[stage].passed(i // stages % 2):
                    yield

                def s_reads(s=stage, kv=kv, here=here):
                    expect("S^T's Q", stage_tile[s], here)
                    expect("S^T's K", kv_item[kv], here[0])

                def dp_reads(s=stage, kv=kv, here=here):
                    expect("dP^T's dO", stage_tile[s], here)
                    expect("dP^T's V", kv_item[kv], here[0])
                issue(c, w, (i, "S"), s_reads)
                issue(c, w, (i, "dP"), dp_reads)
                yield
                while not wait_groups(c, i, 1):  # S^T done
                    yield
                p_tile[c][w] = here
                yield
                generation = bars.arrive(OWN + c, WARPS)
                while not bars.passed(OWN + c, generation):
                    yield

                def dv_reads(c=c, s=stage, here=here):
                    expect("dV's dO", stage_tile[s], here)
                    for part in p_tile[c]:
                        expect(f"dV's P^T (consumer {c})", part, here)
                issue(c, w, (i, "dV"), dv_reads)
                yield
                while not wait_groups(c, i, 1):  # dP^T done
                    yield
                ds_tile[buffer][c][w] = here
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
                    wrong = mutant == "ds_barrier_arrival_at_the_wrong_id"
                    bars.arrive(DS + (1 - dq_consumer) if wrong else ds_bar, 2 * WARPS)
                    yield
                    generation = bars.arrive(OWN + c, WARPS)
                    while not bars.passed(OWN + c, generation):
                        yield

                def dk_reads(c=c, s=stage, b=buffer, here=here):
                    expect("dK's Q", stage_tile[s], here)
                    for part in ds_tile[b][c]:
                        expect(f"dK's dS^T (consumer {c})", part, here)
                issue(c, w, (i, "dK"), dk_reads)
                yield
                if dq_here:
                    def dq_reads(b=buffer, kv=kv, here=here):
                        expect("dQ's K", kv_item[kv], here[0])
                        for other in range(2):
                            for part in ds_tile[b][other]:
                                expect(f"dQ's dS^T (consumer {other})", part, here)
                    issue(c, w, (i, "dQ"), dq_reads)
                    yield
                while not wait_groups(c, i, 0):
                    yield
                empty[stage].arrive()
                yield
                if dq_here:
                    dq_tile[i % dq_tiles][w] = here
                    yield
                    generation = bars.arrive(OWN + c, WARPS)
                    while not bars.passed(OWN + c, generation):
                        yield
                    if w == 0:
                        reduction = {"tile": i % dq_tiles, "query_tile": here}
                        bulk[c].append(reduction)

                        def tma_read(c=c, reduction=reduction):
                            yield
                            for part in dq_tile[reduction["tile"]]:
                                expect("TMA's read of the dQ tile", part, reduction["query_tile"])
                            bulk[c].remove(reduction)
                        agents.append(tma_read())
                    yield
                i += 1
            kv_empty[kv].arrive()  # every product of the item waited for
            if w == 0:
                done[c].append(item)
            round_ += 1
            yield

    agents.append(producer())
    for c in range(2):
        for w in range(WARPS):
            agents.append(warp(c, w))


MUTANTS = ("ds_barrier_arrival_at_the_wrong_id", "kv_empty_phase_off_by_one", "item_taken_twice",
           "item_counter_not_zeroed_between_calls")


def main():
    mutant = next((arg for arg in sys.argv[1:] if not arg.startswith("--")), "")
    if "--mutant" in sys.argv and not mutant:
        mutant = MUTANTS[0]
    if mutant and mutant not in MUTANTS:
        sys.exit(f"unknown mutant {mutant}; the model's: {', '.join(MUTANTS)}")
    one_id = "--one-id" in sys.argv
    rng = random.Random(34)
    runs, failures = 0, {}
    for item_count, blocks in ((1, 1), (3, 1), (4, 2), (7, 3)):
        # (stages, dQ tiles, K/V buffers): D 128's, D 64's, D 64's with one K/V buffer
        for stages, dq_tiles, kv_buffers in ((2, 1, 1), (3, 2, 2), (3, 2, 1)):
            for _ in range(12):
                runs += 1
                # Causal items see 1 to 4 query tiles, the others 4.
                tiles = [rng.choice((1, 2, 3, 4)) for _ in range(item_count)]
                for problem in run(tiles, blocks, stages, dq_tiles, kv_buffers, rng, mutant,
                                   one_id, calls=2):
                    failures.setdefault(problem.split(":")[0].split(" (")[0], problem)
    print(f"{runs} interleavings of two calls each; {len(failures)} kinds of problem")
    for problem in failures.values():
        print("  " + problem)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
