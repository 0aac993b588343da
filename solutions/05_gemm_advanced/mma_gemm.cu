// 05_gemm_advanced/mma_gemm: C = A B^T with mma.sync.aligned.m16n8k16 through inline PTX (on a T4:
// fp16 and m16n8k8, two per k16 step), its operands loaded from shared memory with ldmatrix, the
// shared tiles XOR-swizzled. Reference solution.
//
// Teaches: the warp-level tensor-core instruction under wmma, with its fragments spelled out
// (which lane holds which element: course/gemm_layout.h transcribes the PTX ISA's tables, the
// notes draw them); ldmatrix, which loads four 8 x 8 matrices from shared memory straight into
// that layout, each lane pointing at one row; and a shared layout without bank conflicts for it:
// 128-byte rows whose 16-byte chunks are stored at chunk ^ (row % 8), so that the 8 rows an
// ldmatrix phase reads fall in 8 different groups of banks. (Stored plainly, the same kernel is
// exactly as correct and slower: only the profile shows the difference.)
//
// Run:  grader run 05/mma_gemm --solutions      Profile: grader profile 05/mma_gemm --solutions
// Contract: gemm_bf16.h                         Notes:   notes/05_gemm_advanced.md
#include <cstdint>
#include <stdexcept>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "mma_gemm.h"

namespace {

constexpr int kBM = 128;               // rows of C per block
constexpr int kBN = 128;               // columns of C per block
constexpr int kBK = 64;                // k per step: 64 elements = one 128-byte swizzled row
constexpr int kWarpsM = 2;             // warps along M ...
constexpr int kWarpsN = 4;             // ... and along N
constexpr int kWarpM = kBM / kWarpsM;  // 64 rows of C per warp
constexpr int kWarpN = kBN / kWarpsN;  // 32 columns of C per warp
constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;  // one mma.sync.m16n8k16 (two m16n8k8 on sm_75)
constexpr int kTilesM = kWarpM / kMmaM;           // 4 m16 tiles per warp ...
constexpr int kTilesN = kWarpN / kMmaN;           // ... by 4 n8 tiles: 16 mma per k16 step
constexpr int kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kChunk = 8;                    // elements per 16-byte chunk
constexpr int kChunksPerRow = kBK / kChunk;  // 8: the swizzle permutes them

static_assert(kBK * 2 == course::kSwizzleRowBytes, "a tile row is one 128-byte swizzled row");
static_assert(kTilesN % 2 == 0, "B's ldmatrix.x4 loads two n8 tiles at a time");

// bf16, or fp16 where this build is for a GPU without bf16 tensor cores (sm_75: a T4), whose mma
// is the fp16 m16n8k8 below (course/tensor_element.h).
using Element = course::TensorElement;

// ---- The PTX instructions, each wrapped once ----------------------------------------------------

// The 32-bit shared-memory address of a pointer into shared memory (what ldmatrix takes).
__device__ std::uint32_t shared_address(const void* pointer) {
    return static_cast<std::uint32_t>(__cvta_generic_to_shared(pointer));
}

// Four 8 x 8 matrices of 16-bit elements: lane 8 j + r gives the address of row r of matrix j;
// register j receives matrix j's elements (lane / 4, 2 (lane % 4) + {0, 1}).
__device__ void ldmatrix_x4(std::uint32_t (&regs)[4], std::uint32_t address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(regs[0]), "=r"(regs[1]), "=r"(regs[2]), "=r"(regs[3])
                 : "r"(address)
                 : "memory");
}

#if defined(COURSE_FP16_TENSOR_CORES)
// sm_75's instruction: d += a b for a 16 x 8 fp16 A (2 registers of 2: rows 0-7, rows 8-15), an
// 8 x 8 fp16 B (1 register: k 2t, 2t + 1 of column n = lane / 4) and a 16 x 8 float32 accumulator
// (4 registers, as m16n8k16's): course::mma_k8_a_element, mma_k8_b_element.
__device__ void mma_m16n8k8(float (&d)[4], std::uint32_t a0, std::uint32_t a1, std::uint32_t b) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(b));
}

// One k16 step as two k8 steps. m16n8k8's fragments are the halves of m16n8k16's: A's registers
// 0, 1 and B's register 0 hold k 0-7, A's 2, 3 and B's 1 hold k 8-15. So ldmatrix loads the same
// registers for either, and the k16 step is k 0-7, then k 8-15, into the same accumulators.
__device__ void mma_k16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
    mma_m16n8k8(d, a[0], a[1], b[0]);
    mma_m16n8k8(d, a[2], a[3], b[1]);
}
#else
// d += a b for a 16 x 16 bf16 A (4 registers of 2), a 16 x 8 bf16 B (2 registers of 2) and a
// 16 x 8 float32 accumulator (4 registers): ".row.col" is A row-major, B column-major (n-major,
// k contiguous); the types are those of D, A, B and C, in that order.
__device__ void mma_k16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
#if __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    __trap();  // no bf16 mma before sm_80: the launcher refuses to get here
#endif
}
#endif

// Rows row0 .. row0 + kRows - 1, columns k0 .. k0 + kBK - 1 of a row-major matrix with `rows`
// rows and K columns into a swizzled tile of kRows 128-byte rows: chunk c of row r goes to chunk
// c ^ (r % 8). Zeros outside the matrix (K is a multiple of 8: a chunk is inside or outside).
// Thread t takes chunk t % 8 of a row: 8 threads read 128 contiguous bytes of global memory and
// write them to 8 different bank groups.
template <int kRows>
__device__ void load_tile(Element* tile, const Element* matrix, int rows, int K, int row0, int k0) {
    for (int i = threadIdx.x; i < kRows * kChunksPerRow; i += kThreads) {
        const int r = i / kChunksPerRow, c = i % kChunksPerRow;
        const int row = row0 + r, k = k0 + c * kChunk;
        uint4 chunk = make_uint4(0, 0, 0, 0);
        if (row < rows && k < K) chunk = *reinterpret_cast<const uint4*>(matrix + row * K + k);
        *reinterpret_cast<uint4*>(tile + course::swizzled_bf16_offset(r, c * kChunk)) = chunk;
    }
}

}  // namespace

__global__ void __launch_bounds__(kThreads)
    mma_gemm_kernel(int M, int N, int K, const Element* __restrict__ A,
                    const Element* __restrict__ B, float* __restrict__ C) {
    // 16-byte chunks: 16-byte alignment. (The swizzle is computed from the row within the tile,
    // so any such alignment keeps a row's 8 chunks in 8 different bank groups.)
    __shared__ alignas(16) Element a_tile[kBM * kBK];  // A[row0 + r][k0 + k], swizzled
    __shared__ alignas(16) Element b_tile[kBN * kBK];  // B[col0 + n][k0 + k], swizzled

    const int row0 = blockIdx.y * kBM, col0 = blockIdx.x * kBN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_row = warp / kWarpsN * kWarpM, warp_col = warp % kWarpsN * kWarpN;
    // The row of the 16 x 16 fragment this lane points ldmatrix at, and its first k: A's
    // fragment rows 0-15 (lanes 0-15 for k 0-7, lanes 16-31 for k 8-15), B's two n8 tiles.
    const course::Coord a_source = course::ldmatrix_a_source(lane);
    const course::Coord b_source = course::ldmatrix_b_source(lane);

    float acc[kTilesM][kTilesN][4] = {};

    for (int k0 = 0; k0 < K; k0 += kBK) {
        load_tile<kBM>(a_tile, A, M, K, row0, k0);
        load_tile<kBN>(b_tile, B, N, K, col0, k0);
        __syncthreads();  // the tiles are complete before any warp reads them

#pragma unroll
        for (int k = 0; k < kBK; k += kMmaK) {
            std::uint32_t a[kTilesM][4], b[kTilesN][2];
#pragma unroll
            for (int i = 0; i < kTilesM; ++i) {
                const int row = warp_row + i * kMmaM + a_source.row;
                ldmatrix_x4(a[i], shared_address(a_tile + course::swizzled_bf16_offset(
                                                              row, k + a_source.col)));
            }
#pragma unroll
            for (int j = 0; j < kTilesN; j += 2) {
                const int row = warp_col + j * kMmaN + b_source.row;
                std::uint32_t pair[4];
                ldmatrix_x4(pair, shared_address(b_tile + course::swizzled_bf16_offset(
                                                              row, k + b_source.col)));
                b[j][0] = pair[0], b[j][1] = pair[1];          // n8 tile j: k 0-7, k 8-15
                b[j + 1][0] = pair[2], b[j + 1][1] = pair[3];  // n8 tile j + 1
            }
#pragma unroll
            for (int i = 0; i < kTilesM; ++i)
#pragma unroll
                for (int j = 0; j < kTilesN; ++j) mma_k16(acc[i][j], a[i], b[j]);
        }
        __syncthreads();  // every warp is done reading before the next tiles overwrite them
    }

    // Accumulators 0, 1 of a tile are two neighbouring columns of one row, 2, 3 the same eight
    // rows below (course::mma_c_element): one 8-byte store each. N is a multiple of 8 and the
    // column even, so a pair is inside C or outside it.
#pragma unroll
    for (int i = 0; i < kTilesM; ++i)
#pragma unroll
        for (int j = 0; j < kTilesN; ++j)
#pragma unroll
            for (int half = 0; half < 4; half += 2) {
                const course::Coord e = course::mma_c_element(lane, half);
                const int row = row0 + warp_row + i * kMmaM + e.row;
                const int col = col0 + warp_col + j * kMmaN + e.col;
                if (row < M && col < N)
                    *reinterpret_cast<float2*>(C + row * N + col) =
                        make_float2(acc[i][j][half], acc[i][j][half + 1]);
            }
}

void gemm_bf16(int M, int N, int K, const Element* A, const Element* B, float* C) {
    if (!course::kFp16TensorCores && course::compiled_arch(mma_gemm_kernel) < 80)
        throw std::runtime_error("mma_gemm: bf16 mma.sync needs device code for sm_80 or newer");
    // One block per kBM x kBN tile of C; ceil_div covers the partial tiles at the edges.
    const dim3 grid(course::ceil_div(N, kBN), course::ceil_div(M, kBM));
    mma_gemm_kernel<<<grid, kThreads>>>(M, N, K, A, B, C);
    CUDA_CHECK_LAUNCH();
}
