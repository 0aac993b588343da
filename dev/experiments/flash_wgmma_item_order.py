"""The order of flash_wgmma's work items: balance across SMs and K/V reads from memory (no GPU).

A work item is a (query tile, head) of 128 query rows; its cost is the K/V tiles of 128 keys it
visits (causal: 1 for the first query tile .. T / 128 for the last). Items go to 132 SMs one at a
time, each to the first SM to be free (the hardware's block order; the fast reference's atomic
counter). For each order the model prints the busiest SM's tile-units (the perfect share beside
it) and the MB of K/V read from memory under an LRU cache of 40 MB (the H100's 50 MB L2, less
what Q, O and the rest take), every K/V tile read at the time its SM reaches it.

- readable: the readable kernel's grid, head after head, each head's heaviest query tile first;
- all heads: the heaviest query tiles of every head first, then the next (no sections);
- sections of G: heads in sections of G, the heaviest first within a section (the fast
  reference, G = heads whose K and V take 16 MB: 64 at T 1024 D 64, 16 at T 4096 D 64, 8 at D 128).

    python3 dev/experiments/flash_wgmma_item_order.py
(then the same balance for flash_wgmma_backward's items: backward() below.)
A crude model (tiles read in lockstep, one LRU for all of L2); the timed cases decide.
"""
import collections
import heapq

SMS, L2_BYTES = 132, 40 << 20


def greedy(costs):
    """Each item to the first free SM; returns the busiest SM's load and each SM's items."""
    free = [(0, sm) for sm in range(SMS)]
    items_of = [[] for _ in range(SMS)]
    for i, cost in enumerate(costs):
        t, sm = heapq.heappop(free)
        items_of[sm].append(i)
        heapq.heappush(free, (t + cost, sm))
    return max(t for t, _ in free), items_of


def kv_read_mb(items, items_of, tile_bytes):
    reads = []
    for sm_items in items_of:
        t = 0
        for i in sm_items:
            head, cost = items[i]
            reads += [(t + k, head, k) for k in range(cost)]
            t += cost
    cache, misses = collections.OrderedDict(), 0
    for _, head, k in sorted(reads):
        if (head, k) in cache:
            cache.move_to_end((head, k))
            continue
        misses += 1
        cache[(head, k)] = True
        if len(cache) > L2_BYTES // tile_bytes:
            cache.popitem(last=False)
    return misses * tile_bytes / 1e6


def sectioned(heads, q_tiles, causal, section):
    """(head, cost) of each item in the fast reference's order."""
    items = []
    for first in range(0, heads, section):
        for level in range(q_tiles):
            for head in range(first, min(heads, first + section)):
                items.append((head, q_tiles - level if causal else q_tiles))
    return items


def main():
    for batch_heads, T, D, causal in [(192, 1024, 64, True), (64, 4096, 64, True),
                                      (64, 4096, 64, False), (64, 4096, 128, True),
                                      (64, 4096, 128, False)]:
        q_tiles, tile_bytes = T // 128, 128 * D * 2 * 2  # a K and a V tile
        per_head = 2 * T * D * 2
        print(f"B*H {batch_heads}, T {T}, D {D}{', causal' if causal else ''}:")
        readable = [(h, q_tiles - x if causal else q_tiles) for h in range(batch_heads)
                    for x in range(q_tiles)]
        orders = [("readable", readable),
                  ("all heads", sectioned(batch_heads, q_tiles, causal, batch_heads))]
        section = max(1, min(batch_heads, (16 << 20) // per_head))
        orders.append((f"sections of {section}", sectioned(batch_heads, q_tiles, causal, section)))
        for name, items in orders:
            costs = [cost for _, cost in items]
            busiest, items_of = greedy(costs)
            print(f"  {name:16s} busiest SM {busiest:4d} (perfect {sum(costs) / SMS:6.1f}), "
                  f"K/V read {kv_read_mb(items, items_of, tile_bytes):5.0f} MB")



def backward():
    """flash_wgmma_backward's items: (key block of 128, head), causal key block b seeing the query
    tiles of 64 from 2b on (T / 64 - 2b of them), the others all T / 64; sections of heads whose
    Q, dO and dQ (8 T D bytes) take 16 MB, every head's first key block first (the fast
    reference's kLevelMajor), against the readable grid's head after head. Balance only."""
    print("flash_wgmma_backward (cost: query tiles of 64 a key block of 128 sees):")
    for batch_heads, T, D, causal in [(192, 1024, 64, True), (64, 4096, 64, True),
                                      (64, 4096, 128, True), (64, 4096, 64, False)]:
        blocks, q_tiles = T // 128, T // 64
        cost = [q_tiles - 2 * b if causal else q_tiles for b in range(blocks)]
        section = max(1, min(batch_heads, (16 << 20) // (8 * T * D)))
        readable = [cost[b] for _ in range(batch_heads) for b in range(blocks)]
        level_major = [cost[b] for first in range(0, batch_heads, section) for b in range(blocks)
                       for _ in range(first, min(batch_heads, first + section))]
        print(f"  B*H {batch_heads}, T {T}, D {D}{', causal' if causal else ''}: busiest SM "
              f"{greedy(readable)[0]} head after head, {greedy(level_major)[0]} in sections of "
              f"{section} by level (perfect {sum(readable) / SMS:.1f})")


if __name__ == "__main__":
    main()
    backward()
