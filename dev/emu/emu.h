// A CPU stand-in for the CUDA device features that the kernels of the emulated modules use
// (COURSE_EMULATED_MODULES in Emulate.cmake; dev/README.md). Each GPU thread is a fiber with its
// own stack. The emulator runs one cluster of blocks at a time, and its fibers take turns (a ready
// queue) where a GPU thread waits for others:
//  - block barriers;
//  - warp shuffles, through per-warp slots between two warp barriers, and __syncwarp;
//  - warp-wide instructions (mma.sync, ldmatrix: modules/), which the last lane to arrive
//    carries out for the whole warp;
//  - the split cluster barrier.
// Each block has its own shared-memory arena. Distributed shared memory is the same offset in
// another block's arena. Timing is not modelled.
// Errors as CUDA reports them (shadow/cuda_runtime.h turns the codes into its names and
// messages): a launch the GPU would refuse sets a launch error and runs nothing; a fault inside a
// kernel ends the launch with a sticky error, "misaligned address" for a misaligned vector access
// (a general-protection fault on x86) and "an illegal memory access" otherwise. What only the
// emulator checks aborts with a message: a full-mask shuffle needs all 32 lanes alive, and a
// barrier nobody can pass is a deadlock.
#pragma once
#include <setjmp.h>
#include <signal.h>
#include <ucontext.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

struct Dim3 {
    unsigned x = 1, y = 1, z = 1;
    Dim3() = default;
    Dim3(unsigned x_, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(4) char4 { signed char x, y, z, w; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline int4 make_int4(int a, int b, int c, int d) { return {a, b, c, d}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline char4 make_char4(signed char a, signed char b, signed char c, signed char d) {
    return {a, b, c, d};
}
inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }
inline float __fdividef(float a, float b) { return a / b; }
// The lowest set bit's position, from 1 (0: none).
inline int __ffs(unsigned x) { return x == 0 ? 0 : __builtin_ctz(x) + 1; }
// A float's bits and back (quantization formats take floats apart, radix selects order floats by
// their bits).
inline unsigned __float_as_uint(float v) { unsigned u; std::memcpy(&u, &v, 4); return u; }
inline float __uint_as_float(unsigned u) { float v; std::memcpy(&v, &u, 4); return v; }
// Byte n of the result is byte (s >> 4 n) & 7 of the pair y:x (x the low four bytes).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long pair = (static_cast<unsigned long long>(y) << 32) | x;
    unsigned out = 0;
    for (int n = 0; n < 4; ++n) out |= ((pair >> (8 * ((s >> (4 * n)) & 7))) & 0xFFu) << (8 * n);
    return out;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
template <class T> T __ldcs(const T* p) { return *p; }
template <class T> void __stcs(T* p, T v) { *p = v; }
template <class T> T __ldg(const T* p) { return *p; }
template <class T> T __ldcg(const T* p) { return *p; }
inline void __threadfence() {}
// Atomics: threads switch only where they wait for each other, so a read-modify-write is atomic.
template <class T> T atomicAdd(T* p, T v) { const T old = *p; *p = old + v; return old; }
// Hopper's vector atomics (sm_90): each component added on its own, as there.
inline float2 atomicAdd(float2* p, float2 v) {
    const float2 old = *p;
    p->x += v.x;
    p->y += v.y;
    return old;
}
template <class T> T atomicMin(T* p, T v) { const T old = *p; if (v < old) *p = v; return old; }

// The built-in indices: the scheduler sets them before it runs (or resumes) a thread.
inline Dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace emu {

[[noreturn]] inline void fail(const char* message) {
    std::fprintf(stderr, "emu: %s\n", message);
    std::abort();
}

// cudaError_t codes, as the CUDA runtime numbers them.
constexpr int kInvalidConfiguration = 9;
constexpr int kIllegalAddress = 700;
constexpr int kMisalignedAddress = 716;
inline int launch_error = 0;  // cleared by cudaGetLastError
inline int sticky_error = 0;  // a fault in a kernel: every later call fails, as on a GPU

constexpr std::size_t kStaticShared = 64 * 1024;  // per block, before the dynamic part
constexpr std::size_t kStackBytes = 32 * 1024;

struct Fiber;

// Threads wait at a barrier until the last expected one arrives and opens it. The expected
// count is the threads still running: a thread that has returned no longer counts.
struct Barrier {
    unsigned count = 0;
    std::vector<Fiber*> waiters;
};
struct Warp {
    std::uint64_t slots[32];  // one shuffle's values, one per lane
    Barrier barrier;
    unsigned live = 32;
};
struct Block {
    unsigned rank = 0;  // in its cluster
    // Static shared variables (kStaticShared bytes), then the launch's dynamic shared memory.
    unsigned char* arena = nullptr;
    std::size_t arena_bytes = 0;
    Barrier barrier;
    unsigned live = 0;
    std::vector<Warp> warps;
};
struct Cluster {
    std::vector<Block> blocks;
    std::map<const void*, std::size_t> layout;  // shared variable -> offset, same in every block
    std::size_t next_offset = 0;
    // The split cluster barrier: arrive, then wait for the phase to end.
    Barrier barrier;
    unsigned phase = 0;
    unsigned live = 0;
};
// A fiber's stack. The first thread on it enters it through makecontext/setcontext; when a
// thread returns, the stack waits at `idle`, and the next thread given this stack (in this
// cluster, a later one or a later launch) starts there with a _longjmp. Every switch is then a
// _setjmp/_longjmp, which (unlike the ucontext calls) makes no system call for the signal mask.
struct Stack {
    char* base = nullptr;
    bool entered = false;
    jmp_buf idle;
};
struct Fiber {
    Stack* stack = nullptr;
    jmp_buf where;
    bool started = false;
    Dim3 thread, block;
    Block* home = nullptr;
    Warp* warp = nullptr;
    unsigned lane = 0;
    unsigned arrived_in_phase = 0;  // the cluster phase of its last arrive
};

inline Fiber* current = nullptr;
inline Cluster* current_cluster = nullptr;
inline jmp_buf scheduler_where;
inline std::function<void()> body;
inline std::deque<Fiber*> ready;  // threads that can run, in the order they became ready
// A kernel launched with launch_sequential runs its threads one after another, without fibers
// (fast, for the harness's own fill kernels); a barrier or shuffle there is an error.
inline bool sequential = false;

inline void resume(Fiber& f) {
    current = &f;
    ::threadIdx = f.thread;
    ::blockIdx = f.block;
}

// Parks the running thread on `b` until the barrier opens.
inline void park(Barrier& b) {
    if (sequential) fail("a barrier or shuffle in a kernel launched with launch_sequential");
    b.waiters.push_back(current);
    if (_setjmp(current->where) == 0) _longjmp(scheduler_where, 1);
}

inline void open(Barrier& b) {
    b.count = 0;
    for (Fiber* f : b.waiters) ready.push_back(f);
    b.waiters.clear();
}

// Arrive at `b` and wait until the `expected` threads have arrived.
inline void wait_at(Barrier& b, unsigned expected) {
    if (++b.count == expected)
        open(b);
    else
        park(b);
}

// A thread returned: barriers that were waiting only for it open.
inline void open_if_complete(Barrier& b, unsigned live) {
    if (b.count > 0 && b.count == live) open(b);
}

template <class T>
T shuffle(unsigned mask, T value, unsigned source) {
    static_assert(sizeof(T) <= 8);
    Warp& w = *current->warp;
    if (mask != 0xffffffffu || w.live != 32) fail("a shuffle without all 32 lanes");
    std::memcpy(&w.slots[current->lane], &value, sizeof(T));
    wait_at(w.barrier, w.live);  // every lane has posted its value
    T out;
    std::memcpy(&out, &w.slots[source % 32], sizeof(T));
    wait_at(w.barrier, w.live);  // every lane has read before the slots are reused
    return out;
}

// __syncwarp: the warp's barrier, for all 32 lanes.
inline void sync_warp(unsigned mask) {
    Warp& w = *current->warp;
    if (mask != 0xffffffffu || w.live != 32) fail("a __syncwarp without all 32 lanes");
    wait_at(w.barrier, w.live);
}

// A warp-wide instruction (mma.sync, ldmatrix): every lane posts a pointer to its `Operands`
// (inputs, and room for its results), and the last lane to arrive calls `execute` with the 32
// lanes' pointers, in lane order, before any lane runs on: it reads every lane's inputs and writes
// every lane's results. One pass through the warp barrier, where a shuffle per element would take
// one per value moved.
template <class Operands, class Execute>
void warp_instruction(Operands& mine, Execute execute) {
    Warp& w = *current->warp;
    if (w.live != 32) fail("a warp-wide instruction without all 32 lanes");
    Operands* own = &mine;
    std::memcpy(&w.slots[current->lane], &own, sizeof own);
    if (++w.barrier.count != w.live) return park(w.barrier);
    Operands* lanes[32];
    for (unsigned lane = 0; lane < 32; ++lane)
        std::memcpy(&lanes[lane], &w.slots[lane], sizeof lanes[lane]);
    execute(lanes);
    open(w.barrier);
}

// A static __shared__ variable (kId: its declaration), aligned to kAlign bytes where the
// declaration asks for more than its type's alignment (alignas(16): 16-byte vector accesses).
template <class T, int kId, std::size_t kAlign = alignof(T)>
T& shared() {
    static char key;
    constexpr std::size_t align = kAlign > alignof(T) ? kAlign : alignof(T);
    Cluster& c = *current_cluster;
    auto it = c.layout.find(&key);
    if (it == c.layout.end()) {
        const std::size_t offset = (c.next_offset + align - 1) / align * align;
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

// The phase ends when every running thread of the cluster has arrived.
inline void end_phase_if_complete(Cluster& c) {
    if (c.barrier.count == 0 || c.barrier.count != c.live) return;
    ++c.phase;
    open(c.barrier);
}
inline void cluster_arrive() {
    Cluster& c = *current_cluster;
    current->arrived_in_phase = c.phase;
    ++c.barrier.count;
    end_phase_if_complete(c);
}
inline void cluster_wait() {
    if (current_cluster->phase == current->arrived_in_phase) park(current_cluster->barrier);
}

// The bottom of every stack: runs a thread, then waits for the next one.
[[noreturn]] inline void trampoline() {
    for (;;) {
        body();
        Fiber& f = *current;
        Cluster& c = *current_cluster;
        --f.warp->live;
        --f.home->live;
        --c.live;
        open_if_complete(f.warp->barrier, f.warp->live);
        open_if_complete(f.home->barrier, f.home->live);
        end_phase_if_complete(c);
        if (_setjmp(f.stack->idle) == 0) _longjmp(scheduler_where, 1);
    }
}

// A fault in a kernel leaves the launch through fault_exit, with its error.
inline sigjmp_buf fault_exit;
inline bool in_kernel = false;

inline void on_fault(int signal_number, siginfo_t* info, void*) {
    if (!in_kernel) {  // the host's own fault: die of it as usual
        ::signal(signal_number, SIG_DFL);
        ::raise(signal_number);
        return;
    }
    sticky_error = signal_number == SIGBUS || (signal_number == SIGSEGV && info->si_code == SI_KERNEL)
                       ? kMisalignedAddress
                       : kIllegalAddress;
    siglongjmp(fault_exit, 1);
}

inline void catch_faults() {
    static bool installed = false;
    if (installed) return;
    installed = true;
    static std::unique_ptr<char[]> handler_stack(new char[SIGSTKSZ * 4]);
    stack_t stack{};
    stack.ss_sp = handler_stack.get();
    stack.ss_size = SIGSTKSZ * 4;
    sigaltstack(&stack, nullptr);  // a fiber's stack may be what overflowed
    struct sigaction action {};
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &action, nullptr);
    sigaction(SIGBUS, &action, nullptr);
}

inline unsigned volume(Dim3 d) { return d.x * d.y * d.z; }
// The index of a linear position in a grid or block of shape d (x fastest, as CUDA numbers them).
inline Dim3 unflatten(unsigned i, Dim3 d) { return {i % d.x, i / d.x % d.y, i / (d.x * d.y)}; }

// Runs the grid's clusters (of cluster_size consecutive blocks along x) one after another; in
// each, all threads as fibers (or, with `one_by_one`, each thread to its end in turn).
inline void run(Dim3 grid, Dim3 block, unsigned cluster_size, std::size_t dynamic,
                bool one_by_one, const std::function<void()>& kernel_call) {
    const unsigned blocks = volume(grid), block_threads = volume(block);
    if (sticky_error) return;
    // What a GPU would refuse: nothing runs.
    if (blocks == 0 || grid.x % cluster_size != 0 || cluster_size > 8 || block_threads == 0 ||
        block_threads > 1024 || dynamic > 227 * 1024) {
        launch_error = kInvalidConfiguration;
        return;
    }
    if (block_threads % 32 != 0) fail("launch: blocks of a partial warp are not modelled");
    const auto end_launch = [] {
        in_kernel = false;
        ready.clear();
        current = nullptr;
        sequential = false;
    };
    const unsigned threads = cluster_size * block_threads;
    // One stack per thread of a cluster, reused by every cluster and every launch (after a fault
    // its threads are abandoned wherever they were: each stack is entered afresh).
    static std::unique_ptr<char[]> stack_memory;
    static std::vector<Stack> stacks;
    if (!one_by_one && stacks.size() < threads) {
        stack_memory.reset(new char[threads * kStackBytes]);
        stacks.assign(threads, Stack{});
        for (unsigned i = 0; i < threads; ++i) stacks[i].base = stack_memory.get() + i * kStackBytes;
    }
    catch_faults();
    if (sigsetjmp(fault_exit, 1) != 0) {  // a thread faulted: the launch ends here
        for (Stack& stack : stacks) stack.entered = false;
        end_launch();
        return;
    }
    in_kernel = true;
    ::gridDim = grid;
    ::blockDim = block;
    body = kernel_call;
    sequential = one_by_one;
    std::vector<std::unique_ptr<unsigned char[]>> arenas(cluster_size);
    for (auto& arena : arenas) arena.reset(new unsigned char[kStaticShared + dynamic]);
    std::vector<Fiber> fibers(threads);
    for (unsigned first = 0; first < blocks; first += cluster_size) {
        Cluster cluster;
        cluster.blocks.resize(cluster_size);
        for (unsigned b = 0; b < cluster_size; ++b) {
            Block& home = cluster.blocks[b];
            home.rank = b;
            home.arena_bytes = kStaticShared + dynamic;
            home.arena = arenas[b].get();  // new[]: 16-byte aligned, as float4 needs
            std::memset(home.arena, 0xff, home.arena_bytes);  // NaN garbage, as a GPU might have
            home.live = block_threads;
            home.warps.resize(block_threads / 32);
        }
        cluster.live = threads;
        current_cluster = &cluster;
        for (unsigned i = 0; i < threads; ++i) {
            Fiber& f = fibers[i];
            const unsigned b = i / block_threads, t = i % block_threads;
            f.thread = unflatten(t, block);
            f.block = unflatten(first + b, grid);
            f.home = &cluster.blocks[b];
            f.warp = &cluster.blocks[b].warps[t / 32];
            f.lane = t % 32;
            f.arrived_in_phase = 0;
            f.started = false;
            if (one_by_one) {
                resume(f);
                body();
                continue;
            }
            f.stack = &stacks[i];
            ready.push_back(&f);
        }
        while (!ready.empty()) {
            Fiber* f = ready.front();
            ready.pop_front();
            resume(*f);
            if (_setjmp(scheduler_where) != 0) continue;  // the thread parked or returned
            if (!f->started) {
                f->started = true;
                Stack& stack = *f->stack;
                if (stack.entered) _longjmp(stack.idle, 1);  // a thread's first switch
                stack.entered = true;
                ucontext_t context;
                getcontext(&context);
                context.uc_stack.ss_sp = stack.base;
                context.uc_stack.ss_size = kStackBytes;
                context.uc_link = nullptr;  // trampoline never returns
                makecontext(&context, reinterpret_cast<void (*)()>(trampoline), 0);
                setcontext(&context);  // enters trampoline; comes back by _longjmp
            }
            _longjmp(f->where, 1);
        }
        if (!one_by_one && cluster.live != 0)
            fail("deadlock: threads wait at a barrier that cannot open");
    }
    end_launch();
}

template <class... Params>
struct Launch {
    void (*kernel)(Params...);
    Dim3 grid, block;
    unsigned cluster;
    std::size_t dynamic;
    bool one_by_one = false;
    template <class... Args>
    void operator()(Args... args) const {
        auto k = kernel;
        std::tuple<Params...> params{static_cast<Params>(args)...};
        run(grid, block, cluster, dynamic, one_by_one, [k, params] { std::apply(k, params); });
    }
};

// kernel<<<grid, block, bytes, stream>>>(args), as translate.py writes it. The stream is not
// looked at: a launch is done when it returns, so stream order is program order.
template <class... Params, class G, class B>
Launch<Params...> launch(void (*kernel)(Params...), G grid, B block, std::size_t dynamic = 0,
                         const void* = nullptr) {
    return {kernel, Dim3(grid), Dim3(block), 1, dynamic};
}
// The same for kernels with no barrier or shuffle (translate.py --sequential).
template <class... Params, class G, class B>
Launch<Params...> launch_sequential(void (*kernel)(Params...), G grid, B block,
                                    std::size_t dynamic = 0, const void* = nullptr) {
    return {kernel, Dim3(grid), Dim3(block), 1, dynamic, true};
}

}  // namespace emu

inline void __syncthreads() { emu::wait_at(emu::current->home->barrier, emu::current->home->live); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::sync_warp(mask); }
template <class T> T __shfl_sync(unsigned m, T v, int src) { return emu::shuffle(m, v, src); }
template <class T> T __shfl_up_sync(unsigned m, T v, unsigned delta) {
    const unsigned lane = emu::current->lane;
    return emu::shuffle(m, v, lane >= delta ? lane - delta : lane);
}
template <class T> T __shfl_xor_sync(unsigned m, T v, int offset) {
    return emu::shuffle(m, v, emu::current->lane ^ offset);
}
// The lanes whose value equals this lane's, as one warp-wide instruction.
inline unsigned __match_any_sync(unsigned m, unsigned value) {
    if (m != 0xffffffffu) emu::fail("__match_any_sync without all 32 lanes");
    struct Operands {
        unsigned value, peers;
    } mine{value, 0};
    emu::warp_instruction(mine, [](Operands* (&lanes)[32]) {
        for (Operands* a : lanes)
            for (unsigned j = 0; j < 32; ++j)
                if (lanes[j]->value == a->value) a->peers |= 1u << j;
    });
    return mine.peers;
}
// The vote as a butterfly of shuffles: every lane ends with the OR of all 32 predicates.
inline int __any_sync(unsigned m, int predicate) {
    int any = predicate != 0;
    for (int offset = 1; offset < 32; offset *= 2) any |= __shfl_xor_sync(m, any, offset);
    return any;
}
