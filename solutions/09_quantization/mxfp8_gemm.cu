// 09_quantization/mxfp8_gemm: C = A^ B^T for MXFP8 A and B (blocks of 32 along K), on the bf16
// tensor cores: each tile dequantized on its way into shared memory, then module 05's mma_gemm.
// Reference solution.
//
// Teaches: where the block scales go. Every element times its block's power of two is a bf16
// exactly (E4M3 has 4 significant bits, bf16 8, and both scale by exponents alone), so the tiles
// can be dequantized once, when they are copied to shared memory, and the product is then the
// bf16 GEMM of module 05 with no rounding of its inputs: the scales cost nothing in the loop. The
// other path, FP8 tensor cores (mma.sync e4m3 from sm_89, wgmma on Hopper) over each 32-wide
// block with its two scales applied to the accumulators, multiplies twice as fast but must add
// every block's partial products into the sums with a multiply per accumulator, on the CUDA
// cores: on Hopper that costs about as much as the products (notes/09_quantization.md, section
// 6), which is why Blackwell's tensor cores apply MX scales themselves.
//
// Run:  grader run 09/mxfp8_gemm --solutions
// Contract: mxfp8_gemm.h             Notes:  notes/09_quantization.md
#include <cstdint>
#include <stdexcept>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "mxfp8_gemm.h"
#include "tensor_core.h"

namespace {

constexpr int kBM = 128;  // rows of C per block
constexpr int kBN = 128;  // columns of C per block
constexpr int kBK = 64;   // k per step: 64 bf16 = one 128-byte swizzled row
constexpr int kWarpsM = 2, kWarpsN = 4;
constexpr int kWarpM = kBM / kWarpsM;  // 64 rows of C per warp
constexpr int kWarpN = kBN / kWarpsN;  // 32 columns of C per warp
constexpr int kTilesM = kWarpM / 16;   // 4 m16 tiles per warp ...
constexpr int kTilesN = kWarpN / 8;    // ... by 4 n8 tiles: 16 mma per k16 step
constexpr int kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kChunk = 8;                    // elements per 16-byte chunk of a bf16 tile row
constexpr int kChunksPerRow = kBK / kChunk;  // 8

// E4M3's bits under float32's exponent make the value times 2^-120 (the biases 127 and 7),
// subnormals included (mxfp8.cu says more). The contract rules out NaN codes here.
__device__ float e4m3_to_float(unsigned code) {
    return __uint_as_float((code & 0x80u) << 24 | (code & 0x7Fu) << 20) * 0x1p120f;
}

// 2^(biased - 127), biased 0 .. 254.
__device__ float e8m0_to_float(unsigned biased) {
    return biased == 0 ? 0x1p-127f : __uint_as_float(biased << 23);
}

// Rows row0 .. row0 + kRows - 1, columns k0 .. k0 + kBK - 1 of an MXFP8 matrix (`rows` x K codes,
// a scale per 32 of a row) into a swizzled bf16 tile: chunk c of tile row r (8 codes, one block's
// scale) is dequantized into 16 bytes at tc::swizzled<kBK>(r, 8 c). Zeros outside the matrix (K
// is a multiple of 32: a chunk is inside or outside). Eight threads read 64 consecutive bytes.
template <int kRows>
__device__ void load_tile(__nv_bfloat16* tile, const std::uint8_t* elements,
                          const std::uint8_t* scales, int rows, int K, int row0, int k0) {
#pragma unroll
    for (int n = 0; n < kRows * kChunksPerRow / kThreads; ++n) {
        const int i = threadIdx.x + n * kThreads;
        const int r = i / kChunksPerRow, c = i % kChunksPerRow;
        const int row = row0 + r, k = k0 + c * kChunk;
        uint4 chunk = make_uint4(0, 0, 0, 0);
        if (row < rows && k < K) {
            const uint2 codes = *reinterpret_cast<const uint2*>(elements + row * K + k);
            const float X = e8m0_to_float(scales[row * (K / kMxBlock) + k / kMxBlock]);
            const unsigned words[2] = {codes.x, codes.y};
            std::uint32_t pairs[4];
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                const unsigned word = words[p / 2] >> (16 * (p % 2));
                // Exact: 4 significant bits times a power of two inside bf16's range.
                pairs[p] = tc::pack_bf16(e4m3_to_float(word & 0xFFu) * X,
                                         e4m3_to_float(word >> 8 & 0xFFu) * X);
            }
            chunk = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
        }
        *reinterpret_cast<uint4*>(tile + tc::swizzled<kBK>(r, c * kChunk)) = chunk;
    }
}

}  // namespace

// Module 05's mma_gemm from here on: a block per 128 x 128 tile of C, 8 warps of 64 x 32, per
// k16 step 4 ldmatrix of A, 2 of B (two n8 tiles each), 16 mma.
__global__ void __launch_bounds__(kThreads)
    mxfp8_gemm_kernel(int M, int N, int K, const std::uint8_t* __restrict__ a_elements,
                      const std::uint8_t* __restrict__ a_scales,
                      const std::uint8_t* __restrict__ b_elements,
                      const std::uint8_t* __restrict__ b_scales, float* __restrict__ C) {
    __shared__ alignas(16) __nv_bfloat16 a_tile[kBM * kBK];
    __shared__ alignas(16) __nv_bfloat16 b_tile[kBN * kBK];
    const int row0 = blockIdx.y * kBM, col0 = blockIdx.x * kBN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_row = warp / kWarpsN * kWarpM, warp_col = warp % kWarpsN * kWarpN;
    const course::Coord a_source = course::ldmatrix_a_source(lane);
    const course::Coord b_source = course::ldmatrix_b_source(lane);

    float acc[kTilesM][kTilesN][4] = {};
    for (int k0 = 0; k0 < K; k0 += kBK) {
        load_tile<kBM>(a_tile, a_elements, a_scales, M, K, row0, k0);
        load_tile<kBN>(b_tile, b_elements, b_scales, N, K, col0, k0);
        __syncthreads();  // the tiles are complete before any warp reads them
#pragma unroll
        for (int k = 0; k < kBK; k += 16) {
            std::uint32_t a[kTilesM][4], b[kTilesN][2];
#pragma unroll
            for (int i = 0; i < kTilesM; ++i)
                tc::ldmatrix_x4(a[i], a_tile + tc::swizzled<kBK>(warp_row + 16 * i + a_source.row,
                                                                 k + a_source.col));
#pragma unroll
            for (int j = 0; j < kTilesN; j += 2) {
                std::uint32_t pair[4];
                tc::ldmatrix_x4(pair, b_tile + tc::swizzled<kBK>(warp_col + 8 * j + b_source.row,
                                                                 k + b_source.col));
                b[j][0] = pair[0], b[j][1] = pair[1];          // n8 tile j: k 0-7, k 8-15
                b[j + 1][0] = pair[2], b[j + 1][1] = pair[3];  // n8 tile j + 1
            }
#pragma unroll
            for (int i = 0; i < kTilesM; ++i)
#pragma unroll
                for (int j = 0; j < kTilesN; ++j) tc::mma_bf16(acc[i][j], a[i], b[j][0], b[j][1]);
        }
        __syncthreads();  // every warp is done reading before the next tiles overwrite them
    }

    // Accumulators 0, 1 and 2, 3 are pairs of neighbouring columns (course::mma_c_element): one
    // 8-byte store each; N is a multiple of 8, so a pair is inside C or outside it.
#pragma unroll
    for (int i = 0; i < kTilesM; ++i)
#pragma unroll
        for (int j = 0; j < kTilesN; ++j)
#pragma unroll
            for (int half = 0; half < 4; half += 2) {
                const course::Coord e = course::mma_c_element(lane, half);
                const int row = row0 + warp_row + 16 * i + e.row;
                const int col = col0 + warp_col + 8 * j + e.col;
                if (row < M && col < N)
                    *reinterpret_cast<float2*>(C + row * N + col) =
                        make_float2(acc[i][j][half], acc[i][j][half + 1]);
            }
}

void mxfp8_gemm(int M, int N, int K, const std::uint8_t* a_elements, const std::uint8_t* a_scales,
                const std::uint8_t* b_elements, const std::uint8_t* b_scales, float* C) {
    if (course::compiled_arch(mxfp8_gemm_kernel) < 80)
        throw std::runtime_error("mxfp8_gemm: bf16 mma.sync needs device code for sm_80 or newer");
    const dim3 grid(course::ceil_div(N, kBN), course::ceil_div(M, kBM));
    mxfp8_gemm_kernel<<<grid, kThreads>>>(M, N, K, a_elements, a_scales, b_elements, b_scales, C);
    CUDA_CHECK_LAUNCH();
}
