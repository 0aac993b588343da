// The long-row tier of the tuned row kernels (the fast references of module 06). A row too long
// for registers, staged in one block's shared memory, takes a whole SM, whose loads stop while it
// reduces. On Hopper a row is split over a thread block cluster instead: each block stages a slice
// of at most a given size (less what its threads hold in registers), the blocks merge their
// statistics through distributed shared memory (course/cluster.h), and an SM holds slices of
// several rows, so one row's reduction hides behind the others' loads.
//
//   if (course::launch_split_rows<my_kernel<float4>>(rows, cols / 4, sizeof(float4), kBlock,
//                                                     kHeldVecs, kSliceBytes, args...))
//       return;                      // launched in clusters
//   readable_launcher(...);          // no clusters here: the readable solution's tiers
//
// The kernel finds its row as blockIdx.x / course::cluster_blocks() and its part of the row as
// course::cluster_slice(vecs, cluster_blocks(), cluster_rank(), kSliceAlign / sizeof(Vec)).
#pragma once

#include <cstddef>

#include "course/check.h"
#include "course/cluster.h"
#include "course/launch.h"

namespace course {

// Slices start on 128-byte lines: the first load of each block is then a whole line.
constexpr std::size_t kSliceAlign = 128;

// How a row of `vecs` vectors of `vec_bytes` each is split into slices of at most `slice_bytes`.
struct RowSplit {
    unsigned blocks;          // blocks per row (the cluster's size)
    std::size_t stage_bytes;  // shared memory the longest slice needs, less `held_vecs`
};

inline RowSplit split_row(int vecs, std::size_t vec_bytes, std::size_t slice_bytes, int held_vecs) {
    const auto blocks = static_cast<unsigned>(ceil_div(vecs * vec_bytes, slice_bytes));
    // The first slice is the longest.
    const Slice first = cluster_slice(vecs, blocks, 0, static_cast<int>(kSliceAlign / vec_bytes));
    const int staged_vecs = first.end - first.begin - held_vecs;
    return {blocks, staged_vecs > 0 ? staged_vecs * vec_bytes : 0};
}

// Launches kKernel(args...) on `rows` rows of `vecs` vectors each, every row split over a cluster
// of blocks of `block` threads that hold `held_vecs_per_thread` vectors each in registers and
// stage the rest of their slice (at most `slice_bytes`) in dynamic shared memory. Returns false,
// launching nothing, where that cannot run here: the GPU or the kernel's machine code has no
// clusters (before Hopper), the row needs more than kMaxClusterBlocks blocks, or a slice's stage
// exceeds a block's shared memory. The caller then launches its other tiers.
template <auto kKernel, class... Args>
bool launch_split_rows(int rows, int vecs, std::size_t vec_bytes, unsigned block,
                       int held_vecs_per_thread, std::size_t slice_bytes, Args... args) {
    static const bool clusters = clusters_available(kKernel);
    if (!clusters) return false;
    static const std::size_t capacity = opt_in_shared_bytes(kKernel);  // asked once per kernel
    const RowSplit split =
        split_row(vecs, vec_bytes, slice_bytes, held_vecs_per_thread * static_cast<int>(block));
    if (split.blocks > kMaxClusterBlocks || split.stage_bytes > capacity) return false;
    launch_in_clusters(kKernel, rows * split.blocks, block, split.blocks, split.stage_bytes,
                       args...);
    return true;
}

}  // namespace course
