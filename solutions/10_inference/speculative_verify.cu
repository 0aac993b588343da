// 10_inference/speculative_verify: the verification step of speculative decoding, rejection
// sampling that keeps a prefix of a draft model's tokens and draws one more from the target.
//
// Teaches: why the rule "accept t with probability min(1, p(t) / q(t)), else draw from the
// renormalized max(0, p - q)" makes the tokens follow the target model exactly, whatever the
// draft; the layout of a batch of drafts (gamma + 1 target rows per sequence, gamma draft rows);
// a first-rejection search across threads (atomicMin in shared memory); a draw from a residual
// distribution that has to be renormalized first, in two levels as in `sample` (the mass of each
// chunk of the row, then a scan of the one chunk that holds it), in one pass over the rows. The
// checker compares your tokens with a reference on fixed uniforms and tests their distribution
// over 65536 sequences (chi-square).
//
// Run:  grader run 10/speculative_verify     Stuck:  grader hint 10/speculative_verify
// Contract: speculative_verify.h             Notes:  notes/10_inference.md, section 5
#include "course/exercise.h"
#include "speculative_verify.h"

// One block per sequence, as many threads as a block takes: the draw's pass over one or two rows
// is bound by the time its loads take, and 1024 threads with 2 * kLoads loads each keep 64 KB in
// flight per SM.
constexpr int kBlock = 1024;
constexpr int kWarps = kBlock / 32;
constexpr int kLoads = 8;  // tokens a lane loads, from both rows, before it uses any
// The draw's chunks are as long as the block: the walk of one chunk is one block scan.
constexpr int kChunk = kBlock;
constexpr int kMaxChunks = (1 << 18) / kChunk;  // speculative_verify.h: vocab <= 2^18
// Residual weights as integers, r * 2^40, as in `sample`: integer sums are exact in any order,
// so the chunks' masses and the scans of the draw see the same masses (the scan's last prefix is
// the total, and a goal below it always finds its token), on every run.
constexpr float kFixedPoint = 0x1.0p40f;

using Mass = unsigned long long;

struct VerifyShared {
    Mass chunks[kMaxChunks];  // the residual's mass per chunk
    Mass partials[kWarps];    // the warps' totals of a block scan
    int first_rejected;
    int chunk;  // the chunk that holds the draw, and the mass before it
    Mass before;
};

// A token's residual weight, max(0, p - q); the bonus token's draw has no draft row, q = 0.
__device__ inline Mass residual_mass(float target, float draft) {
    return static_cast<Mass>(fmaxf(0.0f, target - draft) * kFixedPoint);
}

__device__ inline Mass warp_scan(Mass value) {  // inclusive, in lane order
    for (int offset = 1; offset < 32; offset *= 2) {
        const Mass other = __shfl_up_sync(0xffffffffu, value, offset);
        if (threadIdx.x % 32 >= offset) value += other;
    }
    return value;
}

// The inclusive prefix sum of one value per thread, in thread order, and the block's total.
struct Scan {
    Mass inclusive;
    Mass total;
};
__device__ Scan block_scan(Mass value, Mass* partials) {
    const int warp = threadIdx.x / 32;
    Scan scan{warp_scan(value), 0};
    if (threadIdx.x % 32 == 31) partials[warp] = scan.inclusive;
    __syncthreads();
    for (int w = 0; w < kWarps; ++w) {
        if (w < warp) scan.inclusive += partials[w];
        scan.total += partials[w];
    }
    __syncthreads();  // partials is reused by the next call
    return scan;
}

// The residual mass of chunk c, tokens c * kChunk .. + kChunk - 1, summed by one warp (every lane
// gets it). Each lane issues the loads of kLoads tokens from both rows before it uses any: one
// block per SM waits on its loads, and one token at a time would be 8 KB in flight.
__device__ Mass chunk_mass(const float* target, const float* draft, int vocab, int c) {
    Mass sum = 0;
    for (int first = c * kChunk + threadIdx.x % 32; first < (c + 1) * kChunk;
         first += kLoads * 32) {
        float p[kLoads], q[kLoads];
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
            const int i = first + u * 32;
            p[u] = i < vocab ? target[i] : 0.0f;
            q[u] = i < vocab && draft ? draft[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kLoads; ++u) sum += residual_mass(p[u], q[u]);
    }
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    return sum;
}

// The draw, from the residual mass of chunk t in thread t (0 past the last chunk): goal = u * (the
// residual's mass); the token is the first whose inclusive prefix of masses, in vocabulary
// order, exceeds it. A block scan over the chunks finds the chunk that holds the goal, a block
// scan over that chunk's tokens, one per thread, the token.
__device__ void draw_token(const float* target, const float* draft, int vocab, int chunks,
                           Mass chunk, float uniform, int* token, VerifyShared& s) {
    // A goal that no prefix passes (a total that is not the scan's) then reads no token past the
    // row: the chunk after the last holds none.
    if (threadIdx.x == 0) {
        s.chunk = chunks;
        s.before = 0;
    }
    const Scan through_chunk = block_scan(chunk, s.partials);
    // Renormalized: the goal is u times the residual's mass, which is below 1 after a rejection
    // (it is the distance between p_n and q_n).
    const Mass goal = static_cast<Mass>(static_cast<double>(uniform) * through_chunk.total);
    if (through_chunk.inclusive > goal && through_chunk.inclusive - chunk <= goal) {
        s.chunk = threadIdx.x;
        s.before = through_chunk.inclusive - chunk;
    }
    __syncthreads();
    const int i = s.chunk * kChunk + threadIdx.x;
    const Mass own = i < vocab ? residual_mass(target[i], draft ? draft[i] : 0.0f) : 0;
    Mass inclusive = block_scan(own, s.partials).inclusive;
    inclusive += s.before;  // the chunks before this one
    if (inclusive > goal && inclusive - own <= goal) *token = i;
}

// One block per SM (the second argument): without it nvcc 13 keeps the kernel to 32 registers for
// sm_90, room for two blocks, and issues only part of a step's loads before it uses the first.
__global__ void __launch_bounds__(kBlock, 1)
    speculative_verify_kernel(const float* p, const float* q, const int* draft_tokens,
                              const float* uniforms, const float* residual_uniforms,
                              int* out_tokens, int* accepted, int gamma, int vocab) {
    __shared__ VerifyShared s;
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
    if (threadIdx.x == 0) s.first_rejected = gamma;
    __syncthreads();
    if (threadIdx.x < gamma) {
        const int i = threadIdx.x, t = drafts[i];
        if (!(uniforms[b * gamma + i] * draft_row(i)[t] < target_row(i)[t]))
            atomicMin(&s.first_rejected, i);
    }
    __syncthreads();
    const int n = s.first_rejected;
    int* out = out_tokens + b * (gamma + 1);
    const int position = threadIdx.x;
    if (position <= gamma && position != n)  // out[n] is the draw's, below
        out[position] = position < n ? drafts[position] : -1;
    if (threadIdx.x == 0) accepted[b] = n;

    // 2. The residual max(0, p_n - q_n) after a rejection, p_gamma itself for the bonus token.
    const float* target = target_row(n);
    const float* draft = n < gamma ? draft_row(n) : nullptr;

    // 3. The draw, as in `sample`: the residual's mass of each chunk of kChunk tokens, a warp per
    // chunk (the one pass over the rows), then the token.
    const int chunks = (vocab + kChunk - 1) / kChunk;
    for (int c = threadIdx.x / 32; c < chunks; c += kWarps) {
        const Mass sum = chunk_mass(target, draft, vocab, c);
        if (threadIdx.x % 32 == 0) s.chunks[c] = sum;
    }
    __syncthreads();
    draw_token(target, draft, vocab, chunks, threadIdx.x < chunks ? s.chunks[threadIdx.x] : 0,
               residual_uniforms[b], out + n, s);
}

void speculative_verify(const float* p, const float* q, const int* draft_tokens,
                        const float* uniforms, const float* residual_uniforms, int* out_tokens,
                        int* accepted, int batch, int gamma, int vocab) {
    speculative_verify_kernel<<<batch, kBlock>>>(p, q, draft_tokens, uniforms, residual_uniforms,
                                                 out_tokens, accepted, gamma, vocab);
    CUDA_CHECK_LAUNCH();
}
