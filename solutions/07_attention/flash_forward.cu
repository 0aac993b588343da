// 07_attention/flash_forward: flash attention in float32 on the CUDA cores.
// Reference solution.
//
// Teaches: attention without the T x T scores: a block keeps a tile of queries in shared memory
// and walks over K/V tiles, and each query row carries a running maximum m, a running sum l and
// a running output o, rescaled by exp(m_old - m_new) whenever a tile raises the maximum (module
// 06's online softmax, now with a vector o riding along). Memory is O(T D), not O(T^2).
//
// Run:  grader run 07/flash_forward --solutions
// Contract: flash_forward.h            Notes:  notes/07_attention.md
#include <cfloat>
#include <cmath>

#include "course/exercise.h"
#include "flash_forward.h"

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockN = 32;  // keys per K/V tile: one per lane
constexpr unsigned kFullMask = 0xffffffffu;

// Query rows per warp: 8 (a block of 64 rows) for D = 64; 4 (32 rows) for D = 128, so that the
// shared tiles fit in the 64 KB a Turing GPU gives one block.
template <int kD>
constexpr int kRowsPerWarp = kD == 64 ? 8 : 4;
template <int kD>
constexpr int kBlockM = kWarps* kRowsPerWarp<kD>;

template <int kD>
constexpr int shared_floats() {
    // Q tile, K tile transposed (rows padded to 33: lane j reads column j without bank
    // conflicts), V tile, and each warp's probabilities for its rows.
    return kBlockM<kD> * kD + kD * (kBlockN + 1) + kBlockN * kD + kBlockM<kD> * kBlockN;
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(const float* Q, const float* K, const float* V, float* O, float* L, int T,
                         float scale, bool causal) {
    constexpr int kRows = kRowsPerWarp<kD>, kBlockRows = kBlockM<kD>;
    extern __shared__ __align__(16) float shared[];
    float* q_tile = shared;                        // [kBlockRows][kD]
    float* kt_tile = q_tile + kBlockRows * kD;     // [kD][kBlockN + 1]: K transposed
    float* v_tile = kt_tile + kD * (kBlockN + 1);  // [kBlockN][kD]
    float* p_tile = v_tile + kBlockN * kD;         // [kWarps][kRows][kBlockN]

    const int q0 = blockIdx.x * kBlockRows;
    const long long head = blockIdx.y;
    Q += head * T * kD;
    K += head * T * kD;
    V += head * T * kD;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row0 = warp * kRows;  // this warp's rows in the tile
    float* p_rows = p_tile + warp * kRows * kBlockN;

    // The query tile, zeros past T (those rows are computed and never stored).
    for (int e = threadIdx.x; e < kBlockRows * kD; e += kThreads)
        q_tile[e] = q0 + e / kD < T ? Q[static_cast<long long>(q0) * kD + e] : 0.0f;

    // Per row: running max m of the scaled scores seen so far, this lane's share of the running
    // sum l of exp(s - m) (the lanes' shares are added at the end), and o, this lane's columns
    // lane + 32 e of the running output sum_j exp(s_j - m) v_j.
    float m[kRows], l[kRows], o[kRows][kD / 32];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        m[r] = -FLT_MAX;  // not -inf: exp(-inf - (-inf)) would be NaN for a row not yet seen
        l[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < kD / 32; ++e) o[r][e] = 0.0f;
    }

    for (int key0 = 0; key0 < T; key0 += kBlockN) {
        __syncthreads();  // every warp is done with the previous K/V tile
        for (int e = threadIdx.x; e < kBlockN * kD; e += kThreads) {
            const int key = e / kD, d = e % kD;
            const bool valid = key0 + key < T;
            const long long at = static_cast<long long>(key0 + key) * kD + d;
            kt_tile[d * (kBlockN + 1) + key] = valid ? K[at] : 0.0f;
            v_tile[key * kD + d] = valid ? V[at] : 0.0f;
        }
        __syncthreads();

        // Scores: lane j computes s = scale * q_r . k_j for the warp's rows r.
        float s[kRows] = {};
        for (int d = 0; d < kD; d += 4) {
            const float k0 = kt_tile[d * (kBlockN + 1) + lane],
                        k1 = kt_tile[(d + 1) * (kBlockN + 1) + lane],
                        k2 = kt_tile[(d + 2) * (kBlockN + 1) + lane],
                        k3 = kt_tile[(d + 3) * (kBlockN + 1) + lane];
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                const float4 q = *reinterpret_cast<const float4*>(q_tile + (row0 + r) * kD + d);
                s[r] += q.x * k0 + q.y * k1 + q.z * k2 + q.w * k3;
            }
        }

        const int key = key0 + lane;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const int query = q0 + row0 + r;
            const bool masked = key >= T || (causal && key > query);
            const float score = masked ? -INFINITY : s[r] * scale;
            // The tile's maximum over the warp, then the online update of (m, l, o).
            float tile_max = score;
            for (int offset = 16; offset > 0; offset /= 2)
                tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, offset));
            const float new_max = fmaxf(m[r], tile_max);
            const float correction = expf(m[r] - new_max);  // rescales what was summed so far
            const float p = expf(score - new_max);          // 0 for a masked key
            m[r] = new_max;
            l[r] = l[r] * correction + p;
#pragma unroll
            for (int e = 0; e < kD / 32; ++e) o[r][e] *= correction;
            p_rows[r * kBlockN + lane] = p;
        }
        __syncwarp();  // the warp's probabilities are in shared memory

        // o += P V over the tile's keys: 4 keys at a time, the probabilities read as float4.
        for (int j = 0; j < kBlockN; j += 4) {
            float v[4][kD / 32];
#pragma unroll
            for (int jj = 0; jj < 4; ++jj)
#pragma unroll
                for (int e = 0; e < kD / 32; ++e) v[jj][e] = v_tile[(j + jj) * kD + lane + 32 * e];
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                const float4 p = *reinterpret_cast<const float4*>(p_rows + r * kBlockN + j);
#pragma unroll
                for (int e = 0; e < kD / 32; ++e)
                    o[r][e] += p.x * v[0][e] + p.y * v[1][e] + p.z * v[2][e] + p.w * v[3][e];
            }
        }
        __syncwarp();  // read before the next tile overwrites them
    }

#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        float sum = l[r];
        for (int offset = 16; offset > 0; offset /= 2)
            sum += __shfl_xor_sync(kFullMask, sum, offset);
        const int query = q0 + row0 + r;
        if (query >= T) continue;
        const long long out = (head * T + query) * kD;
#pragma unroll
        for (int e = 0; e < kD / 32; ++e) O[out + lane + 32 * e] = o[r][e] / sum;
        if (lane == 0) L[head * T + query] = m[r] + logf(sum);
    }
}

template <int kD>
void launch(const float* Q, const float* K, const float* V, float* O, float* L, int heads_total,
            int T, float scale, bool causal) {
    constexpr int kSharedBytes = shared_floats<kD>() * sizeof(float);
    CUDA_CHECK(cudaFuncSetAttribute(flash_forward_kernel<kD>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
    const dim3 grid(course::ceil_div(T, kBlockM<kD>), heads_total);
    flash_forward_kernel<kD><<<grid, kThreads, kSharedBytes>>>(Q, K, V, O, L, T, scale, causal);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void flash_forward(const float* Q, const float* K, const float* V, float* O, float* L, int batch,
                   int heads, int T, int D, float scale, bool causal) {
    if (D == 64)
        launch<64>(Q, K, V, O, L, batch * heads, T, scale, causal);
    else
        launch<128>(Q, K, V, O, L, batch * heads, T, scale, causal);
}
