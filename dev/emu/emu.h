// A CPU stand-in for the CUDA device features that the module-06 kernels use (dev/README.md).
// Each GPU thread is a fiber (ucontext) with its own stack. The emulator runs one cluster of
// blocks at a time, and its fibers take turns at the points where a GPU thread waits for others:
//  - block barriers;
//  - warp shuffles, through per-warp slots between two warp barriers;
//  - the split cluster barrier.
// Each block has its own shared-memory arena. Distributed shared memory is the same offset in
// another block's arena. Timing is not modelled.
// Checks: a full-mask shuffle needs all 32 lanes alive; a barrier nobody can pass is a deadlock.
// Both abort with a message.
#pragma once
#include <ucontext.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <tuple>
#include <map>
#include <memory>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

struct Dim3 { unsigned x = 1, y = 1, z = 1; };
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }
inline float __fdividef(float a, float b) { return a / b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
template <class T> T __ldcs(const T* p) { return *p; }
template <class T> void __stcs(T* p, T v) { *p = v; }
template <class T> T __ldg(const T* p) { return *p; }

namespace emu {

constexpr std::size_t kStaticShared = 64 * 1024;  // per block, before the dynamic part
constexpr std::size_t kStackBytes = 64 * 1024;

[[noreturn]] inline void fail(const char* message) {
    std::fprintf(stderr, "emu: %s\n", message);
    std::abort();
}

// A barrier for `expected` threads: the last to arrive opens the current generation.
struct Barrier {
    unsigned count = 0, generation = 0;
};
struct Warp {
    // One shuffle's values, one slot per lane.
    std::uint64_t slots[32];
    Barrier barrier;
    unsigned live = 0;
};
struct Block {
    unsigned rank = 0;  // in its cluster
    // Static shared variables (kStaticShared bytes), then the launch's dynamic shared memory.
    unsigned char* arena = nullptr;
    std::size_t arena_bytes = 0;
    Barrier barrier;
    unsigned live = 0;  // threads that have not returned: a barrier waits for these only
    std::vector<Warp> warps;
};
struct Cluster {
    std::vector<Block> blocks;
    std::map<const void*, std::size_t> layout;  // shared variable -> offset, same in every block
    std::size_t next_offset = 0;
    Barrier barrier;
    unsigned live = 0;
};
struct Fiber {
    ucontext_t context;
    std::unique_ptr<char[]> stack;
    Dim3 thread, block;
    Block* home = nullptr;
    Warp* warp = nullptr;
    unsigned lane = 0;
    unsigned cluster_token = 0;
    bool done = false;
};

inline Fiber* current = nullptr;
inline Cluster* current_cluster = nullptr;
inline ucontext_t scheduler;
inline Dim3 grid_dim, block_dim;
inline std::function<void()> body;
inline unsigned long long progress = 0;

inline void yield() { swapcontext(&current->context, &scheduler); }

// Arrive and wait until `expected` threads have arrived in this generation.
inline void wait_at(Barrier& b, unsigned expected) {
    const unsigned generation = b.generation;
    ++progress;
    if (++b.count == expected) {
        b.count = 0;
        ++b.generation;
        return;
    }
    while (b.generation == generation) yield();
}
inline void release_if_complete(Barrier& b, unsigned live) {
    if (b.count > 0 && b.count == live) {
        b.count = 0;
        ++b.generation;
    }
}

template <class T>
T shuffle(unsigned mask, T value, unsigned source) {
    Warp& w = *current->warp;
    if (mask != 0xffffffffu || w.live != 32) fail("a shuffle without all 32 lanes");
    static_assert(sizeof(T) <= 8);
    std::memcpy(&w.slots[current->lane], &value, sizeof(T));
    wait_at(w.barrier, w.live);
    T out;
    std::memcpy(&out, &w.slots[source % 32], sizeof(T));
    wait_at(w.barrier, w.live);
    return out;
}

template <class T, int kId>
T& shared() {
    static char key;
    Cluster& c = *current_cluster;
    auto it = c.layout.find(&key);
    if (it == c.layout.end()) {
        const std::size_t offset = (c.next_offset + alignof(T) - 1) / alignof(T) * alignof(T);
        if (offset + sizeof(T) > kStaticShared) fail("static shared memory over kStaticShared");
        c.next_offset = offset + sizeof(T);
        it = c.layout.emplace(&key, offset).first;
    }
    return *reinterpret_cast<T*>(current->home->arena + it->second);
}
inline unsigned char* dynamic_shared() { return current->home->arena + kStaticShared; }

template <class T>
T* map_shared_rank(T* p, unsigned rank) {
    const auto* bytes = reinterpret_cast<unsigned char*>(p);
    Block& mine = *current->home;
    if (bytes < mine.arena || bytes >= mine.arena + mine.arena_bytes)
        fail("map_shared_rank of a pointer outside shared memory");
    return reinterpret_cast<T*>(current_cluster->blocks.at(rank).arena + (bytes - mine.arena));
}

inline void cluster_arrive() {
    Cluster& c = *current_cluster;
    current->cluster_token = c.barrier.generation;
    ++progress;
    if (++c.barrier.count == c.live) {
        c.barrier.count = 0;
        ++c.barrier.generation;
    }
}
inline void cluster_wait() {
    while (current_cluster->barrier.generation == current->cluster_token) yield();
}

inline void trampoline() {
    body();
    Fiber& f = *current;
    f.done = true;
    ++progress;
    --f.warp->live;
    --f.home->live;
    --current_cluster->live;
    release_if_complete(f.warp->barrier, f.warp->live);
    release_if_complete(f.home->barrier, f.home->live);
    release_if_complete(current_cluster->barrier, current_cluster->live);
}

// Runs grid / cluster_size clusters one after another; in each, all threads as fibers.
inline void run(unsigned grid, unsigned block_threads, unsigned cluster_size, std::size_t dynamic,
                const std::function<void()>& kernel_call) {
    // What a GPU would refuse (block sizes that are not whole warps are not modelled).
    if (grid == 0 || grid % cluster_size != 0 || cluster_size > 8)
        fail("launch: an empty grid, or one that is not whole clusters of up to 8 blocks");
    if (block_threads == 0 || block_threads > 1024 || block_threads % 32 != 0)
        fail("launch: a block of 0 or over 1024 threads, or not whole warps");
    if (dynamic > 227 * 1024) fail("launch: more dynamic shared memory than an H100 has");
    grid_dim = {grid, 1, 1};
    block_dim = {block_threads, 1, 1};
    body = kernel_call;
    for (unsigned first = 0; first < grid; first += cluster_size) {
        Cluster cluster;
        cluster.blocks.resize(cluster_size);
        std::vector<std::unique_ptr<unsigned char[]>> arenas;  // 16-byte aligned, as float4 needs
        std::vector<Fiber> fibers(cluster_size * block_threads);
        for (unsigned b = 0; b < cluster_size; ++b) {
            Block& block = cluster.blocks[b];
            block.rank = b;
            block.arena_bytes = kStaticShared + dynamic;
            arenas.emplace_back(new unsigned char[block.arena_bytes]);
            block.arena = arenas.back().get();
            std::memset(block.arena, 0xff, block.arena_bytes);  // NaN garbage, as a GPU might have
            block.live = block_threads;
            block.warps.resize(block_threads / 32);
            for (Warp& w : block.warps) w.live = 32;
        }
        cluster.live = cluster_size * block_threads;
        current_cluster = &cluster;
        for (unsigned i = 0; i < fibers.size(); ++i) {
            Fiber& f = fibers[i];
            const unsigned b = i / block_threads, t = i % block_threads;
            f.thread = {t, 0, 0};
            f.block = {first + b, 0, 0};
            f.home = &cluster.blocks[b];
            f.warp = &cluster.blocks[b].warps[t / 32];
            f.lane = t % 32;
            f.stack.reset(new char[kStackBytes]);
            getcontext(&f.context);
            f.context.uc_stack.ss_sp = f.stack.get();
            f.context.uc_stack.ss_size = kStackBytes;
            f.context.uc_link = &scheduler;
            makecontext(&f.context, trampoline, 0);
        }
        for (;;) {
            bool any = false;
            const unsigned long long before = progress;
            for (Fiber& f : fibers) {
                if (f.done) continue;
                any = true;
                current = &f;
                swapcontext(&scheduler, &f.context);
            }
            if (!any) break;
            if (progress == before) fail("deadlock: no thread can pass its barrier");
        }
    }
    current = nullptr;
}

template <class... Params>
struct Launch {
    void (*kernel)(Params...);
    unsigned grid, block, cluster;
    std::size_t dynamic;
    template <class... Args>
    void operator()(Args... args) const {
        auto k = kernel;
        std::tuple<Params...> params{static_cast<Params>(args)...};
        run(grid, block, cluster, dynamic, [k, params] { std::apply(k, params); });
    }
};
template <class... Params, class G, class B>
Launch<Params...> launch(void (*kernel)(Params...), G grid, B block, std::size_t dynamic = 0) {
    return {kernel, static_cast<unsigned>(grid), static_cast<unsigned>(block), 1, dynamic};
}

}  // namespace emu

#define threadIdx (::emu::current->thread)
#define blockIdx (::emu::current->block)
#define blockDim (::emu::block_dim)
#define gridDim (::emu::grid_dim)
inline void __syncthreads() { emu::wait_at(emu::current->home->barrier, emu::current->home->live); }
template <class T> T __shfl_sync(unsigned m, T v, int src) { return emu::shuffle(m, v, src); }
template <class T> T __shfl_xor_sync(unsigned m, T v, int offset) {
    return emu::shuffle(m, v, emu::current->lane ^ offset);
}
