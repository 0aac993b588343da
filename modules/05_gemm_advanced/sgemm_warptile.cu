// 05_gemm_advanced/sgemm_warptile: module 04's vectorized SGEMM with the block tile split into warp
// tiles, each thread's 8 x 8 outputs spread over its warp tile so that shared reads have no bank
// conflicts, and the kernel a template whose tile sizes an autotuner picks.
//
// Teaches: the warp as a level of tiling between the block and the thread (a warp's 32 threads
// cover a compact kWM x kWN tile of C, and each shared load of a row of A or B is then shared by
// the warp's threads of that row or column); placing a thread's outputs as 2 x 2 strips of 4 x 4
// half a warp tile apart, so that the threads of a warp read one contiguous span of a tile row
// (conflict-free), where 8 contiguous columns per thread put several threads on the same banks;
// a kernel templated on its tiles, instantiated for a list of configurations, with the valid ones
// enforced at compile time and the fastest picked by timing them on your GPU (the autotuner:
// README.md).
//
// Run:  grader run 05/sgemm_warptile       Stuck:   grader hint 05/sgemm_warptile
// Contract: sgemm_warptile.h (module 04's sgemm.h)   Notes: notes/05_gemm_advanced.md
#include <iterator>
#include <stdexcept>
#include <string>

#include "course/exercise.h"
#include "sgemm_warptile.h"

namespace {

// The tiles of one configuration. A block computes kBM x kBN of C in steps of kBK in k; its warps
// each compute kWM x kWN; a thread computes 8 x 8 of its warp's tile, as 2 x 2 strips of
// kStrip x kStrip whose corners lie half a warp tile apart in each direction.
template <int BM, int BN, int BK, int WM, int WN>
struct Tiles {
    static constexpr int kBM = BM, kBN = BN, kBK = BK, kWM = WM, kWN = WN;
    static constexpr int kStrip = 4;
    static constexpr int kThreadRows = WM / (2 * kStrip);  // threads down a warp tile ...
    static constexpr int kThreadCols = WN / (2 * kStrip);  // ... and across it
    static constexpr int kWarpCols = BN / WN;              // warp tiles across the block tile
    static constexpr int kThreads = 32 * (BM / WM) * kWarpCols;
    // 64 accumulators per thread make registers what limits the blocks an SM holds: ask the
    // compiler for 128 per thread at most (65536 registers hold 512 such threads), as in
    // sgemm_blocktile_2d, so that 512 / kThreads blocks fit.
    static constexpr int kBlocksPerSm = 512 / kThreads;

    static_assert(kThreadRows * kThreadCols == 32, "a warp's 32 threads cover its tile");
    static_assert(BM % WM == 0 && BN % WN == 0, "the block tile splits into whole warp tiles");
    static_assert(BK % 4 == 0, "a step of k is whole float4s of A's rows");
    static_assert(kThreads <= 512, "at most 512 threads of 128 registers per block");
    static_assert((BM + BN) * BK * 4 <= 48 * 1024, "the tiles fit 48 KB of static shared memory");
};

}  // namespace

// TODO: module 04's load4 helper (4 floats of a row as a float4, one 16-byte load where allowed).

template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kBlocksPerSm)
    sgemm_warptile_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                          const float* __restrict__ B, float beta, float* __restrict__ C,
                          bool a_rows_aligned, bool b_rows_aligned) {
    // TODO: start from your sgemm_vectorized kernel, with T::kBM, T::kBN, T::kBK for its tiles
    //       and T::kThreads threads: the same shared tiles (A's transposed) and loads.
    // TODO: warp w = threadIdx.x / 32 owns the kWM x kWN tile at (w / T::kWarpCols * kWM,
    //       w % T::kWarpCols * kWN) of the block tile; lane l's first strip starts kStrip * (l /
    //       T::kThreadCols) rows and kStrip * (l % T::kThreadCols) columns into it, its others
    //       kWM / 2 rows and kWN / 2 columns further. At each k: two float4s of A's column k and
    //       two of B's row k (one per strip), then their 64 products.
    // TODO: the epilogue of sgemm_vectorized, for the thread's 4 strips.
}

// TODO: template <class T> void launch(M, N, K, alpha, A, B, beta, C): sgemm_vectorized's
//       launcher for sgemm_warptile_kernel<T> (T::kBM x T::kBN tiles, T::kThreads threads).
// TODO: the configurations, each a name and a launcher: struct Config { const char* name;
//       void (*launch)(int, int, int, float, const float*, const float*, float, float*); }; and
//       constexpr Config kConfigs[] = {{"BM128 BN128 BK16 WM32 WN64", launch<Tiles<128, 128,
//       16, 32, 64>>}, ...}: a few block tiles, warp tiles and steps of k. And constexpr int
//       kChosen, the one sgemm() runs: the autotuner's winner (README.md says how to run it).

int sgemm_config_count() {
    COURSE_TODO("sgemm_warptile: list your configurations, then delete this line");
}

const char* sgemm_config_name(int config) {
    COURSE_TODO("sgemm_warptile: name configuration " + std::to_string(config) +
                ", then delete this line");
}

void sgemm_with_config(int config, int M, int N, int K, float alpha, const float* A, const float* B,
                       float beta, float* C) {
    // TODO: run configuration `config` (std::out_of_range where there is none).
    COURSE_TODO("sgemm_warptile: run configuration " + std::to_string(config) +
                ", then delete this line");
}

void sgemm(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
    // TODO: sgemm_with_config(kChosen, ...).
    COURSE_TODO("sgemm_warptile: write the kernel and launch it, then delete this line");
}
