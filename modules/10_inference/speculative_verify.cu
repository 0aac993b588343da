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

__global__ void speculative_verify_kernel(const float* p, const float* q, const int* draft_tokens,
                                          const float* uniforms, const float* residual_uniforms,
                                          int* out_tokens, int* accepted, int gamma, int vocab) {
    // TODO: block b verifies sequence b. Its target rows start at p + (b * (gamma + 1)) * vocab,
    //       its draft rows at q + (b * gamma) * vocab (64-bit offsets).
    // TODO: n = the first position i whose draft token is rejected (uniforms[b][i] not below
    //       p / q at the token), gamma if none; accepted[b] = n; out_tokens[b][i] = t_i for
    //       i < n and -1 for i > n.
    // TODO: the residual's weights as integers, (unsigned long long)(max(0, p_n - q_n) * 2^40),
    //       q = 0 when n == gamma (the bonus token is drawn from p_gamma); their sum per chunk
    //       of 1024 tokens, a warp per chunk, each lane loading 8 tokens of both rows before it
    //       uses any, into shared memory.
    // TODO: out_tokens[b][n] = the first token whose cumulative weight exceeds u times the total
    //       weight (u = residual_uniforms[b]): a block scan over the chunks finds the chunk that
    //       holds it, a block scan over that chunk's tokens, plus the chunks before, the token.
}

void speculative_verify(const float* p, const float* q, const int* draft_tokens,
                        const float* uniforms, const float* residual_uniforms, int* out_tokens,
                        int* accepted, int batch, int gamma, int vocab) {
    // TODO: one block of 1024 threads per sequence, then CUDA_CHECK_LAUNCH().
    COURSE_TODO(
        "speculative_verify: write speculative_verify_kernel and launch it, then delete this line");
}
