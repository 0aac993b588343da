// Thread block clusters in device code (Hopper, sm_90 and newer): the blocks of a cluster run at
// the same time, on SMs of one GPC, and read each other's shared memory ("distributed shared
// memory"). A long row split over a cluster stays on chip with several blocks per SM.
//
// Built for an older architecture, a cluster is one block: cluster_blocks() is 1 and the calls
// below do what they would do in a cluster of one. The host launches clusters only where
// course::clusters_available (course/launch.h) says the kernel can run them.
#pragma once

#include <cooperative_groups.h>

#include "course/check.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define COURSE_CLUSTERS 1
#else
#define COURSE_CLUSTERS 0
#endif

namespace course {

// Blocks in this block's cluster: 1 in a launch without clusters.
__device__ inline unsigned cluster_blocks() {
#if COURSE_CLUSTERS
    return cooperative_groups::this_cluster().num_blocks();
#else
    return 1;
#endif
}

// This block's place in its cluster, 0 .. cluster_blocks() - 1 (blockIdx.x % cluster size for
// clusters along x).
__device__ inline unsigned cluster_rank() {
#if COURSE_CLUSTERS
    return cooperative_groups::this_cluster().block_rank();
#else
    return 0;
#endif
}

// The same object in the shared memory of the cluster's block of rank `rank` (distributed shared
// memory: a load through it is a round trip to that block's SM); this block's own without
// clusters.
template <class T>
__device__ T* in_cluster_block(T* object, unsigned rank) {
#if COURSE_CLUSTERS
    return cooperative_groups::this_cluster().map_shared_rank(object, rank);
#else
    (void)rank;
    return object;
#endif
}

// A barrier of every thread of the cluster, after which each block's shared-memory writes are
// visible to the whole cluster; __syncthreads() without clusters.
__device__ inline void cluster_sync() {
#if COURSE_CLUSTERS
    cooperative_groups::this_cluster().sync();
#else
    __syncthreads();
#endif
}

// The part [begin, end) of `count` items (a row's packs) that the block of rank `rank` holds when
// a cluster of `blocks` blocks splits them: equal shares, each rounded up to a multiple of
// `align` items so that every share starts on a 128-byte line when `align` items are 128 bytes
// (the last share is the shorter one, possibly empty). One block holds everything.
struct Slice {
    int begin;
    int end;
};

__host__ __device__ inline Slice cluster_slice(int count, unsigned blocks, unsigned rank,
                                               int align) {
    const int share = ceil_div(ceil_div(count, static_cast<int>(blocks)), align) * align;
    const int begin = static_cast<int>(rank) * share;
    return {begin < count ? begin : count, begin + share < count ? begin + share : count};
}

// Combines one value per block of the cluster (`block_value`, the same in every thread of a
// block) with `merge`, and returns the result to every thread of every block. `slot` is a
// __shared__ T of the calling kernel; use a fresh slot per call. The values are merged in rank
// order, so every block gets the same bits. Up to kMaxClusterBlocks (8, the portable limit).
// After the last call, a kernel calls cluster_arrive() and, before it ends, cluster_wait(): a
// block must not exit while another may still read its slot.
constexpr unsigned kMaxClusterBlocks = 8;

template <class T, class Merge>
__device__ T cluster_reduce(T block_value, T* slot, Merge merge) {
#if COURSE_CLUSTERS
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    const unsigned blocks = cluster.num_blocks();
    if (blocks == 1) return block_value;
    if (threadIdx.x == 0) *slot = block_value;
    cluster.sync();  // every block's value is posted, and visible cluster-wide, before any read
    // All reads first (each is a round trip to another SM), then the merges.
    T posted[kMaxClusterBlocks];
#pragma unroll
    for (unsigned rank = 0; rank < kMaxClusterBlocks; ++rank)
        if (rank < blocks) posted[rank] = *cluster.map_shared_rank(slot, rank);
    T total = posted[0];
#pragma unroll
    for (unsigned rank = 1; rank < kMaxClusterBlocks; ++rank)
        if (rank < blocks) total = merge(total, posted[rank]);
    return total;
#else
    (void)slot;
    (void)merge;
    return block_value;
#endif
}

// The split barrier that keeps shared memory alive while others read it: arrive after the last
// cluster_reduce, wait just before the kernel ends (the work in between is not held up).
__device__ inline void cluster_arrive() {
#if COURSE_CLUSTERS
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    if (cluster.num_blocks() > 1) cluster.barrier_arrive();
#endif
}

__device__ inline void cluster_wait() {
#if COURSE_CLUSTERS
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    if (cluster.num_blocks() > 1) cluster.barrier_wait();
#endif
}

}  // namespace course
