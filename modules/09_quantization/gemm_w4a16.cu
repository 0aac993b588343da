// 09_quantization/gemm_w4a16: y = W x for 1 to 64 tokens on the tensor cores, INT4 weights
// dequantized on their way into mma.sync's B fragments (a Marlin-like kernel).
//
// Teaches: a weight layout made once, ahead of time, for the instruction that reads it (each lane
// loads its own fragments for 8 k16 steps with one 16-byte load); INT4 to bf16 without a
// conversion instruction (a shift, a mask-and-xor in one LOP3, a bf16x2 subtraction: exact); a
// group scale applied to the group's partial sums in float32; several groups of weights in flight
// per warp (a ring of registers), since at 16 tokens the kernel is a read of W; the activations
// through two shared tiles (cp.async and ldmatrix, module 05), one barrier a group; split-K with
// atomicAdd, so that a few tokens still fill the GPU. The checker reports your speed-up over
// cuBLAS on bf16 weights and the format's accuracy.
//
// Run:  grader run 09/gemm_w4a16             Stuck:  grader hint 09/gemm_w4a16
// Contract: gemm_w4a16.h                     Notes:  notes/09_quantization.md
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "gemm_w4a16.h"
#include "tensor_core.h"

__global__ void tile_int4_kernel(const uint4* packed, int K, std::size_t lanes, uint4* tiled) {
    // TODO: thread i = (tile * (K / 128) + group) * 32 + lane (i < lanes): read the 64 bytes of
    //       row 8 tile + lane / 4 in the group (4 uint4s), and build the lane's 4 words: nibble p
    //       of word w is k = 16 s + 2 (lane % 4) + h + 8 r of the group, with s = 2 w + (p % 4) /
    //       2, r = p % 2, h = p / 4 (gemm_w4a16.h); tiled[i] = the 4 words.
}

template <int kTilesM>
__global__ void gemm_w4a16_kernel(int M, int N, int K, const __nv_bfloat16* x, const uint4* tiled,
                                  const float* scales, float* y, int per_split,
                                  std::uint32_t pair136) {
    // TODO: block (bx, by): 64 columns of y (4 warps x 2 n8 tiles), groups by * per_split .. of K,
    //       all M rows as kTilesM m16 tiles; float acc[2][kTilesM][4] = {}.
    // TODO: per group, the weights: the lane's uint4 of each n8 tile (tiled[(tile * groups +
    //       group) * 32 + lane]), kept in a ring of kAhead groups of registers (4 up to 32
    //       tokens, 2 beyond; the group loop unrolled by kAhead so that the slot index is a
    //       constant): load the slice's first kAhead groups, and refill each slot with the group
    //       kAhead later once it is computed.
    // TODO: the scales of the block's 64 columns for its slice (at most 32 groups) into a
    //       __shared__ float [64][33] once, before the loop: consecutive threads on consecutive
    //       groups of a column, every load issued before any store; per group, a lane reads its
    //       two columns' (2 (lane % 4), + 1) there.
    // TODO: per group, x: two shared tiles (16 kTilesM rows x 128, tc::swizzled<128>); the first
    //       group's tile copied before the loop with tc::cp_async_16 (rows past M: valid false,
    //       zeros) and tc::cp_async_commit(); each group: tc::cp_async_wait<0>(), __syncthreads()
    //       (the one barrier), then the next group's copy into the other tile.
    // TODO: 8 k16 steps: A fragments by tc::ldmatrix_x4 (course::ldmatrix_a_source); B register r
    //       of step s from nibbles p, p + 4 of word s / 2 (p = 2 (s % 2) + r): mask 0x000F000F,
    //       xor pair136 (0x43084308, from the launcher: in a register it makes the mask-and-xor
    //       one LOP3, where two literals make two), __hsub2 136 (pair136 again); tc::mma_bf16
    //       (bf16 in every build; tc::mma would be fp16 in a build for a T4) into zeroed partial
    //       sums; then acc += part * the column's scale.
    // TODO: atomicAdd each accumulator into y (course::mma_c_element) where the row is < M.
}

void tile_int4_weights(const std::uint8_t* packed, int N, int K, std::uint8_t* tiled) {
    // TODO: one thread per lane's 16 bytes (N * K / 32 of them), then CUDA_CHECK_LAUNCH().
    COURSE_TODO("gemm_w4a16: write tile_int4_kernel and launch it, then delete this line");
}

void gemm_w4a16(int M, int N, int K, const __nv_bfloat16* x, const std::uint8_t* tiled,
                const float* scales, float* y) {
    if (course::compiled_arch(gemm_w4a16_kernel<1>) < 80)
        throw std::runtime_error("gemm_w4a16: bf16 mma.sync needs device code for sm_80 or newer");
    // TODO: kTilesM = ceil_div(M, 16) (a switch over 1 .. 4); splits of K: as many as one wave
    //       holds (cudaOccupancyMaxActiveBlocksPerMultiprocessor x cudaDevAttrMultiProcessorCount,
    //       over ceil_div(N, 64)), but slices of 8 to 32 groups; cudaMemsetAsync(y, 0, ...);
    //       grid (ceil_div(N, 64), splits) of 128 threads, pair136 = 0x43084308;
    //       CUDA_CHECK_LAUNCH().
    COURSE_TODO("gemm_w4a16: write gemm_w4a16_kernel and launch it, then delete this line");
}
