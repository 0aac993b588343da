#!/usr/bin/env python3
"""A model of pairwise_cosine_fast.cu's staged epilogue and of its units' schedule, their index
arithmetic only (course authors, no GPU: the CPU emulator runs neither TMA nor wgmma).

    python3 dev/experiments/pairwise_cosine_staging.py 2 3 65 255 256 257 700   # the N to check

Walks every unit of the kernel's triangle (squares of 128, each one consumer's unit, its two
64-row halves an accumulator each), every warp of the unit's consumer and chunk of 64 columns of
each half, as store_distances does: each register's pair staged at
staged(r, (col + run_shift(row)) % 64) (the wgmma D layout, course::wgmma_d_element), then read
back by rows, 16 bytes per lane, stored as a 16-byte vector or float by float. Asserts that no
staging place is written twice, that every pair i < j < N lands once at triangle_index(i, j, N)
and nothing else is written, and that each 16-byte store starts on a 16-byte boundary (the
distances are 16-byte aligned). Then the ping-pong schedule for grids of 1 .. 140 blocks: the
consumers' units (the block's l-th is consumer l % 2's, its loads l k_tiles onward) take each of
the producer's loads once, in its order, and every turn handed over (named_barrier_arrive at
kTurnBarrier + 1 - c) is waited for once (named_barrier_sync at kTurnBarrier + c): none left
pending, none waited for in vain. Written by hand from the kernel: change both together.
"""
import sys

kBN, kBM, kWgmmaM, kWarpRows, kChunk, kHalfAccumulators = 128, 128, 64, 16, 64, 64
kHalves = kBM // kWgmmaM
kChunkRegisters = kHalfAccumulators * kChunk // kBN
kChunks = kHalves * kBN // kChunk


def triangle_index(i, j, n):
    return i * n - i * (i + 1) // 2 + (j - i - 1)


def run_origin(row, n):
    return row * n - row * (row + 1) // 2 - row - 1


def run_shift(row, n):
    return run_origin(row, n) & 3


def staged(row, position):
    pattern = row % 4 * 2 + row // 4 % 2
    return row * kChunk + ((position // 4) ^ pattern) * 4 + position % 4


def wgmma_d_element(thread, reg):
    lane, i = thread % 32, reg % 4
    return (16 * (thread // 32) + lane // 4 + 8 * (i // 2),
            8 * (reg // 4) + 2 * (lane % 4) + i % 2)


def ceil_div(a, b):
    return -(-a // b)


def unit_count(n):
    squares = ceil_div(n, kBN)
    return squares * (squares + 1) // 2


def unit_of(unit, squares):
    b, si = unit, 0
    while b >= squares - si:
        b -= squares - si
        si += 1
    return si * kBM, (si + b) * kBN


def units(n):
    """(row0, col0) of the kernel's units, in its order (triangle_tile's walk)."""
    return [unit_of(u, ceil_div(n, kBN)) for u in range(unit_count(n))]


def check(n):
    total = n * (n - 1) // 2
    written = [0] * total
    vectors = scalars = 0

    def store(index, pair):
        i, j = pair
        assert i < j < n and index == triangle_index(i, j, n), (index, pair)
        written[index] += 1

    for row0, col0 in units(n):
        for warp in range(4):
            for chunk in range(kChunks):
                first_row = row0 + chunk // (kBN // kChunk) * kWgmmaM + warp * kWarpRows
                staging = {}  # place -> the pair whose distance it holds
                for lane in range(32):
                    for reg in range(chunk * kChunkRegisters, (chunk + 1) * kChunkRegisters):
                        row, col = wgmma_d_element(warp * 32 + lane, reg % kHalfAccumulators)
                        r = row % kWarpRows
                        place = staged(r, (col + run_shift(first_row + r, n)) % kChunk)
                        assert place not in staging, "a staging place written twice"
                        staging[place] = (first_row + r, col0 + col)
                chunk_col = col0 + chunk % (kBN // kChunk) * kChunk
                for lane in range(32):
                    unit = lane % 16
                    for r in range(lane // 16, kWarpRows, 2):
                        row = first_row + r
                        origin = run_origin(row, n) + chunk_col
                        v = [staging[staged(r, 4 * unit) + k] for k in range(4)]
                        first = 4 * unit - run_shift(row, n)
                        if first >= 0 and row < chunk_col + first and chunk_col + first + 3 < n:
                            assert (origin + first) % 4 == 0, "a 16-byte store off a boundary"
                            for k in range(4):
                                store(origin + first + k, v[k])
                            vectors += 1
                        else:
                            for k in range(4):
                                c = first + k + kChunk if first + k < 0 else first + k
                                if row < chunk_col + c < n:
                                    store(origin + c, v[k])
                                    scalars += 1
    assert all(w == 1 for w in written), f"N {n}: {written.count(0)} pairs never written"
    print(f"N {n}: {total} pairs, each written once; {4 * vectors / max(total, 1):.1%} of them "
          f"in {vectors} 16-byte stores, {scalars} float by float")


def check_schedule(n, k_tiles=12):
    """The kernel's loops for every grid of 1 .. 140 blocks (the launcher's is min(units, SMs))."""
    units_ = unit_count(n)
    for grid in range(1, min(units_, 140) + 1):
        for block in range(grid):
            produced = [load for u in range(block, units_, grid) for load in
                        range(len(range(block, u, grid)) * k_tiles,
                              (len(range(block, u, grid)) + 1) * k_tiles)]
            assert produced == list(range(len(produced))), "the producer's loads out of order"
            consumed, arrivals, syncs = [], {0: 0, 1: 0}, {0: 0, 1: 0}
            for consumer in range(2):
                l, u = consumer, block + consumer * grid
                while u < units_:
                    if l > 0:
                        syncs[consumer] += 1
                    consumed += range(l * k_tiles, (l + 1) * k_tiles)
                    if u + grid < units_:
                        arrivals[1 - consumer] += 1
                    l, u = l + 2, u + 2 * grid
            assert sorted(consumed) == produced, "a load consumed twice or never"
            assert arrivals == syncs, f"grid {grid}, block {block}: turns {arrivals} vs {syncs}"
    print(f"N {n}: {units_} units; the schedule's loads and turns match for grids 1 .. "
          f"{min(units_, 140)}")


if __name__ == "__main__":
    for n in map(int, sys.argv[1:] or ["2", "3", "65", "255", "256", "257", "700"]):
        check(n)
        check_schedule(n)
