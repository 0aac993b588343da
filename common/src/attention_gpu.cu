// The float32 GPU reference of attention: course/reference/attention_gpu.h. One warp per row;
// lane l holds elements l, l + 32, ... of a D-vector (at most 4: D <= 128).
#include <cmath>
#include <stdexcept>

#include "course/check.h"
#include "course/exercise.h"
#include "course/reference/attention_gpu.h"

namespace course::reference::gpu {

namespace {

constexpr int kMaxPerLane = 4;    // D <= 128
constexpr int kRowsPerBlock = 8;  // 8 warps of 32

__device__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// a . b for D-vectors of which this lane holds a[lane + 32 e] (in registers) and reads b.
__device__ float dot(const float (&a)[kMaxPerLane], const float* b, int D, int lane) {
    float sum = 0.0f;
    for (int e = 0; e < D / 32; ++e) sum += a[e] * b[lane + 32 * e];
    return warp_sum(sum);
}

__device__ void load(float (&a)[kMaxPerLane], const float* row, int D, int lane) {
    for (int e = 0; e < D / 32; ++e) a[e] = row[lane + 32 * e];
}

// Warp w of the grid owns row w of the B * H * T rows; returns false for the warps past the end.
__device__ bool warp_row(long long rows, long long& row, int& lane) {
    row = static_cast<long long>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    lane = threadIdx.x % 32;
    return row < rows;
}

__global__ void forward_kernel(const float* Q, const float* K, const float* V, float* O, float* L,
                               long long rows, int T, int D, float scale, bool causal) {
    long long row;
    int lane;
    if (!warp_row(rows, row, lane)) return;
    const long long head = row / T;
    const int i = static_cast<int>(row % T), visible = causal ? i + 1 : T;
    const float* k = K + head * T * D;
    const float* v = V + head * T * D;
    float q[kMaxPerLane], o[kMaxPerLane] = {};
    load(q, Q + row * D, D, lane);
    // Two passes: the maximum, then the exponentials against it.
    float max = -INFINITY;
    for (int j = 0; j < visible; ++j)
        max = fmaxf(max, scale * dot(q, k + static_cast<long long>(j) * D, D, lane));
    float sum = 0.0f;
    for (int j = 0; j < visible; ++j) {
        const float p = expf(scale * dot(q, k + static_cast<long long>(j) * D, D, lane) - max);
        sum += p;
        for (int e = 0; e < D / 32; ++e)
            o[e] += p * v[static_cast<long long>(j) * D + lane + 32 * e];
    }
    for (int e = 0; e < D / 32; ++e) O[row * D + lane + 32 * e] = o[e] / sum;
    if (lane == 0) L[row] = max + logf(sum);
}

// dQ_i and D_i (saved for the key rows) for query row i.
__global__ void dq_kernel(const float* Q, const float* K, const float* V, const float* O,
                          const float* L, const float* dO, float* dQ, float* Dvec, long long rows,
                          int T, int D, float scale, bool causal) {
    long long row;
    int lane;
    if (!warp_row(rows, row, lane)) return;
    const long long head = row / T;
    const int i = static_cast<int>(row % T), visible = causal ? i + 1 : T;
    float q[kMaxPerLane], dout[kMaxPerLane], dq[kMaxPerLane] = {};
    load(q, Q + row * D, D, lane);
    load(dout, dO + row * D, D, lane);
    const float Di = dot(dout, O + row * D, D, lane);
    for (int j = 0; j < visible; ++j) {
        const long long kj = (head * T + j) * D;
        const float p = expf(scale * dot(q, K + kj, D, lane) - L[row]);
        const float dS = p * (dot(dout, V + kj, D, lane) - Di);
        for (int e = 0; e < D / 32; ++e) dq[e] += scale * dS * K[kj + lane + 32 * e];
    }
    for (int e = 0; e < D / 32; ++e) dQ[row * D + lane + 32 * e] = dq[e];
    if (lane == 0) Dvec[row] = Di;
}

// dK_j and dV_j for key row j: a sum over the queries that see key j.
__global__ void dkdv_kernel(const float* Q, const float* K, const float* V, const float* L,
                            const float* dO, const float* Dvec, float* dK, float* dV,
                            long long rows, int T, int D, float scale, bool causal) {
    long long row;
    int lane;
    if (!warp_row(rows, row, lane)) return;
    const long long head = row / T;
    const int j = static_cast<int>(row % T);
    float k[kMaxPerLane], v[kMaxPerLane], dk[kMaxPerLane] = {}, dv[kMaxPerLane] = {};
    load(k, K + row * D, D, lane);
    load(v, V + row * D, D, lane);
    for (int i = causal ? j : 0; i < T; ++i) {
        const long long qi = (head * T + i) * D, li = head * T + i;
        const float p = expf(scale * dot(k, Q + qi, D, lane) - L[li]);
        const float dS = p * (dot(v, dO + qi, D, lane) - Dvec[li]);
        for (int e = 0; e < D / 32; ++e) {
            dv[e] += p * dO[qi + lane + 32 * e];
            dk[e] += scale * dS * Q[qi + lane + 32 * e];
        }
    }
    for (int e = 0; e < D / 32; ++e) {
        dK[row * D + lane + 32 * e] = dk[e];
        dV[row * D + lane + 32 * e] = dv[e];
    }
}

void check_shape(const AttentionShape& shape) {
    if (shape.D % 32 != 0 || shape.D > 32 * kMaxPerLane)
        throw std::invalid_argument("the GPU attention reference needs D a multiple of 32, <= 128");
}

unsigned blocks_for(long long rows) {
    return static_cast<unsigned>(course::ceil_div(rows, static_cast<long long>(kRowsPerBlock)));
}

}  // namespace

void attention_forward(const float* Q, const float* K, const float* V, float* O, float* L,
                       const AttentionShape& shape, float scale, bool causal) {
    check_shape(shape);
    const auto rows = static_cast<long long>(shape.rows());
    forward_kernel<<<blocks_for(rows), 32 * kRowsPerBlock>>>(
        Q, K, V, O, L, rows, static_cast<int>(shape.T), static_cast<int>(shape.D), scale, causal);
    CUDA_CHECK_LAUNCH();
}

void attention_backward(const float* Q, const float* K, const float* V, const float* O,
                        const float* L, const float* dO, float* dQ, float* dK, float* dV,
                        const AttentionShape& shape, float scale, bool causal) {
    check_shape(shape);
    const auto rows = static_cast<long long>(shape.rows());
    const int T = static_cast<int>(shape.T), D = static_cast<int>(shape.D);
    float* Dvec = nullptr;
    CUDA_CHECK(cudaMallocAsync(&Dvec, shape.rows() * sizeof(float), 0));
    dq_kernel<<<blocks_for(rows), 32 * kRowsPerBlock>>>(Q, K, V, O, L, dO, dQ, Dvec, rows, T, D,
                                                        scale, causal);
    CUDA_CHECK_LAUNCH();
    dkdv_kernel<<<blocks_for(rows), 32 * kRowsPerBlock>>>(Q, K, V, L, dO, Dvec, dK, dV, rows, T, D,
                                                          scale, causal);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaFreeAsync(Dvec, 0));
}

}  // namespace course::reference::gpu
