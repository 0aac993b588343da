// 10_inference/sample: temperature, top-k and top-p sampling of a token from each row of logits,
// with thresholds found by radix select instead of a sort.
//
// Teaches: what a sampler computes (a softmax with a temperature, restricted to the top k tokens
// and to the nucleus holding top_p of the probability); why no sort is needed: both cuts are a
// threshold on the logits, found by a radix select over their bits (a histogram of 256 digits,
// four rounds), with counts for top-k and probability mass for top-p; sums that do not depend on
// the order of the additions (integers in fixed point), so that a sample is the same on every
// run; the draw itself, a block-wide scan in vocabulary order. The checker compares your tokens
// with a reference on fixed draws and tests their distribution over 65536 draws (chi-square).
//
// Run:  grader run 10/sample                 Stuck:  grader hint 10/sample
// Contract: sample.h                         Notes:  notes/10_inference.md
#include "course/exercise.h"
#include "sample.h"

__global__ void sample_kernel(const float* logits, const float* uniforms, int* tokens, int vocab,
                              float temperature, int top_k, float top_p) {
    // TODO: block r samples row r (logits + std::size_t(r) * vocab).
    // TODO: the row's maximum; the top-k threshold t_k (a radix select of the top_k-th largest
    //       logit); the kept weights e_i and their sum; the top-p threshold t_p (the same select,
    //       weighing each token by e_i).
    // TODO: the draw: the first kept token, in vocabulary order, whose cumulative probability
    //       exceeds uniforms[r]; tokens[r].
}

void sample(const float* logits, const float* uniforms, int* tokens, int rows, int vocab,
            float temperature, int top_k, float top_p) {
    // TODO: one block of 256 threads per row, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("sample: write sample_kernel and launch it, then delete this line");
}
