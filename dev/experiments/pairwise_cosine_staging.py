#!/usr/bin/env python3
"""A model of pairwise_cosine_fast.cu's staged epilogue and of its units' schedule, their index
arithmetic only (course authors, no GPU: the CPU emulator runs neither TMA nor wgmma).

    python3 dev/experiments/pairwise_cosine_staging.py 2 3 65 255 256 257 700   # the N to check

Walks every unit of the kernel's triangle (squares of 128, each one consumer's unit, its two
64-row halves an accumulator each), every warp of the unit's consumer and both halves, as
store_distances does: each register's distance staged in the warp's row r at
staged_position(p, offset + b), the row rotated by rotation() (the wgmma D layout,
course::wgmma_d_element), then read back by store_rows, a half warp per row: the body's 16-byte
vectors (all loaded, those inside the body stored) and the ends float by float, on the masked
path where the unit is on the diagonal or reaches past N and the unmasked one elsewhere. Asserts
that no staging place is written twice, that every 16-byte load and store starts on a 16-byte
boundary (the distances are 16-byte aligned), that every pair i < j < N lands once at
triangle_index(i, j, N) and nothing else is written, and that the unmasked path is taken only
where every pair of the unit is stored; counts the staging stores' bank wavefronts. Then the
ping-pong schedule for grids of 1 .. 140 blocks: the consumers' units (the block's l-th is
consumer l % 2's, its loads l k_tiles onward) take each of the producer's loads once, in its
order, and every turn handed over (named_barrier_arrive at kTurnBarrier + 1 - c) is waited for
once (named_barrier_sync at kTurnBarrier + c): none left pending, none waited for in vain.
Written by hand from the kernel: change both together.
"""
import sys

kBN, kBM, kWgmmaM, kWarpRows, kHalfAccumulators = 128, 128, 64, 16, 64
kHalves = kBM // kWgmmaM
kColumnPairs = kHalfAccumulators // 4


def triangle_index(i, j, n):
    return i * n - i * (i + 1) // 2 + (j - i - 1)


def run_origin(row, n):
    return row * n - row * (row + 1) // 2 - row - 1


def rotation(row_in_warp, row, n):
    return (run_origin(row, n) & 3) + 8 * (row_in_warp % 4)


def staged_position(p, offset):
    position = 8 * p + offset
    return position if p < 12 else (position if position < kBN else position - kBN)


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
    vectors = scalars = stores = wavefronts = 0

    def store(index, pair):
        i, j = pair
        assert i < j < n and index == triangle_index(i, j, n), (index, pair)
        written[index] += 1

    for row0, col0 in units(n):
        masked = not (col0 > row0 and col0 + kBN <= n)
        if not masked:
            assert all(row0 + r < col0 + c < n for r in (0, kBM - 1) for c in (0, kBN - 1))
        for warp in range(4):
            for half in range(kHalves):
                first_row = row0 + half * kWgmmaM + warp * kWarpRows
                staging = {}  # place -> the pair whose distance it holds
                banks = {}    # (p, k, b), one store instruction -> its lanes' places
                for lane in range(32):
                    for p in range(kColumnPairs):
                        for k in range(2):
                            for b in range(2):
                                r = lane // 4 + 8 * k
                                row, col = wgmma_d_element(warp * 32 + lane, 4 * p + 2 * k + b)
                                assert (row, col) == (warp * kWarpRows + r,
                                                      8 * p + 2 * (lane % 4) + b)
                                offset = 2 * (lane % 4) + rotation(r, first_row + r, n)
                                position = staged_position(p, offset + b)
                                assert position == (col + rotation(r, first_row + r, n)) % kBN
                                place = r * kBN + position
                                assert place not in staging, "a staging place written twice"
                                staging[place] = (first_row + r, col0 + col)
                                banks.setdefault((p, k, b), []).append(place)
                for places in banks.values():
                    per_bank = {}
                    for place in places:
                        per_bank.setdefault(place % 32, set()).add(place)
                    wavefronts += max(len(v) for v in per_bank.values())
                    stores += 1
                for lane in range(32):
                    e = lane % 16
                    for i in range(kWarpRows // 2):
                        r = 2 * i + lane // 16
                        row = first_row + r
                        origin = run_origin(row, n) + col0
                        rotate = rotation(r, row, n)

                        def staged(c):
                            return r * kBN + ((c + rotate) & (kBN - 1))

                        if masked:
                            c_begin = min(max(row + 1 - col0, 0), kBN)
                            c_end = max(min(kBN, n - col0), c_begin)
                        else:
                            c_begin, c_end = 0, kBN
                        aligned = c_begin + (-(origin + c_begin) & 3)
                        begin, stop = aligned, c_end - ((origin + c_end) & 3)
                        if masked and begin >= stop:
                            begin = stop = c_end
                        for pass_ in range(2):
                            loaded = staged(aligned + 4 * (e + 16 * pass_))
                            assert loaded % 4 == 0, "a 16-byte load off a boundary"
                            c = begin + 4 * (e + 16 * pass_)
                            if c < stop:
                                assert staged(c) == loaded and (origin + c) % 4 == 0, \
                                    "a 16-byte store off a boundary"
                                for q in range(4):
                                    store(origin + c + q, staging[loaded + q])
                                vectors += 1
                        before, after = begin - c_begin, c_end - stop
                        end_column = c_begin + e if e < before else stop + e - before
                        if e < before + after:
                            store(origin + end_column, staging[staged(end_column)])
                            scalars += 1
    assert all(w == 1 for w in written), f"N {n}: {written.count(0)} pairs never written"
    print(f"N {n}: {total} pairs, each written once; {4 * vectors / max(total, 1):.1%} of them "
          f"in {vectors} 16-byte stores, {scalars} float by float; staging stores "
          f"{wavefronts / max(stores, 1):.2f} wavefronts each")


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
