// 10_inference/speculative_verify: the verification step of speculative decoding, rejection
// sampling that keeps a prefix of a draft model's tokens and draws one more from the target.
//
// Teaches: why the rule "accept t with probability min(1, p(t) / q(t)), else draw from the
// renormalized max(0, p - q)" makes the tokens follow the target model exactly, whatever the
// draft; the layout of a batch of drafts (gamma + 1 target rows per sequence, gamma draft rows);
// a first-rejection search across threads (atomicMin in shared memory); a draw from a residual
// distribution that has to be renormalized first. The checker compares your tokens with a
// reference on fixed uniforms and tests their distribution over 65536 sequences (chi-square).
//
// Run:  grader run 10/speculative_verify     Stuck:  grader hint 10/speculative_verify
// Contract: speculative_verify.h             Notes:  notes/10_inference.md, section 5
#include "course/exercise.h"
#include "speculative_verify.h"

constexpr int kBlock = 256;
constexpr int kWarps = kBlock / 32;
// Residual weights as integers, r * 2^40, as in `sample`: integer sums are exact in any order,
// so the total and the scan of the draw see the same masses (the scan's last prefix is the
// total, and a target below it always finds its token), on every run.
constexpr float kFixedPoint = 0x1.0p40f;

using Mass = unsigned long long;

// The sum of one value per thread, the result in every thread.
__device__ inline Mass block_sum(Mass value, Mass* partials) {
    for (int offset = 16; offset > 0; offset /= 2)
        value += __shfl_xor_sync(0xffffffffu, value, offset);
    if (threadIdx.x % 32 == 0) partials[threadIdx.x / 32] = value;
    __syncthreads();
    Mass total = 0;
    for (int w = 0; w < kWarps; ++w) total += partials[w];
    __syncthreads();  // partials is reused by the next call
    return total;
}

__global__ void speculative_verify_kernel(const float* p, const float* q, const int* draft_tokens,
                                          const float* uniforms, const float* residual_uniforms,
                                          int* out_tokens, int* accepted, int gamma, int vocab) {
    __shared__ int first_rejected;
    __shared__ Mass partials[kWarps];
    const int b = blockIdx.x;
    // Row i of sequence b: the target has gamma + 1 rows per sequence, the draft gamma.
    const auto target_row = [&](int i) {
        return p + (static_cast<std::size_t>(b) * (gamma + 1) + i) * vocab;
    };
    const auto draft_row = [&](int i) {
        return q + (static_cast<std::size_t>(b) * gamma + i) * vocab;
    };
    const int* drafts = draft_tokens + b * gamma;

    // 1. Every drafted position tested at once, one thread each; the first rejection wins.
    // u < p / q is tested as u * q < p: q(t) > 0, and no division.
    if (threadIdx.x == 0) first_rejected = gamma;
    __syncthreads();
    if (threadIdx.x < gamma) {
        const int i = threadIdx.x, t = drafts[i];
        if (!(uniforms[b * gamma + i] * draft_row(i)[t] < target_row(i)[t]))
            atomicMin(&first_rejected, i);
    }
    __syncthreads();
    const int n = first_rejected;
    int* out = out_tokens + b * (gamma + 1);
    for (int i = threadIdx.x; i <= gamma; i += kBlock)
        if (i != n) out[i] = i < n ? drafts[i] : -1;  // out[n] is the draw's, below
    if (threadIdx.x == 0) accepted[b] = n;

    // 2. The residual max(0, p_n - q_n) after a rejection, p_gamma itself for the bonus token.
    const float* target = target_row(n);
    const float* draft = n < gamma ? draft_row(n) : nullptr;
    const auto mass = [&](int i) {
        const float r = draft ? fmaxf(0.0f, target[i] - draft[i]) : target[i];
        return static_cast<Mass>(r * kFixedPoint);
    };
    Mass total = 0;
    for (int i = threadIdx.x; i < vocab; i += kBlock) total += mass(i);
    total = block_sum(total, partials);
    // Renormalized: the draw's target is u times the residual's mass, which is below 1 after a
    // rejection (it is the distance between p_n and q_n).
    const Mass goal = static_cast<Mass>(static_cast<double>(residual_uniforms[b]) * total);

    // 3. The draw, as in `sample`: tiles of kBlock tokens in vocabulary order, an inclusive scan
    // of their masses per tile, until the tile whose prefix passes the goal.
    Mass before = 0;  // the mass of the tiles already walked
    for (int tile = 0; tile < vocab; tile += kBlock) {
        const int i = tile + threadIdx.x;
        const Mass own = i < vocab ? mass(i) : 0;
        Mass inclusive = own;
        for (int offset = 1; offset < 32; offset *= 2) {
            const Mass other = __shfl_up_sync(0xffffffffu, inclusive, offset);
            if (threadIdx.x % 32 >= offset) inclusive += other;
        }
        if (threadIdx.x % 32 == 31) partials[threadIdx.x / 32] = inclusive;
        __syncthreads();
        Mass tile_total = 0;
        for (int w = 0; w < kWarps; ++w) {
            if (w < static_cast<int>(threadIdx.x / 32)) inclusive += partials[w];
            tile_total += partials[w];
        }
        __syncthreads();
        inclusive += before;
        if (inclusive > goal && inclusive - own <= goal) out[n] = i;
        before += tile_total;
        if (before > goal) return;  // the same in every thread: the block leaves together
    }
}

void speculative_verify(const float* p, const float* q, const int* draft_tokens,
                        const float* uniforms, const float* residual_uniforms, int* out_tokens,
                        int* accepted, int batch, int gamma, int vocab) {
    speculative_verify_kernel<<<batch, kBlock>>>(p, q, draft_tokens, uniforms, residual_uniforms,
                                                 out_tokens, accepted, gamma, vocab);
    CUDA_CHECK_LAUNCH();
}
