// 10_inference/sample: temperature, top-k and top-p sampling of a token from each row of logits,
// with thresholds found by radix select instead of a sort.
//
// Teaches: what a sampler computes (a softmax with a temperature, restricted to the top k tokens
// and to the nucleus holding top_p of the probability); why no sort is needed: both cuts are a
// threshold on the logits, found by a radix select over their bits (a histogram of 256 digits a
// round), with counts for top-k and probability mass for top-p; a histogram that does not
// serialize when most keys share a digit (copies of each bin, 32-bit atomics); few passes over
// the row (the maximum fused with the first round, the rounds that every candidate shares
// skipped, an early exit); sums that do not depend on the order of the additions (integers in
// fixed point), so that a sample is the same on every run; the draw in two levels, the mass of
// each chunk of the row, then a scan of the one chunk that holds it. The checker compares your
// tokens with a reference on fixed draws and tests their distribution over 65536 draws
// (chi-square).
//
// Run:  grader run 10/sample                 Stuck:  grader hint 10/sample
// Contract: sample.h                         Notes:  notes/10_inference.md
#include "course/exercise.h"
#include "sample.h"

__global__ void sample_kernel(const float* logits, const float* uniforms, int* tokens, int vocab,
                              float temperature, int top_k, float top_p) {
    // TODO: block r samples row r (logits + std::size_t(r) * vocab).
    // TODO: pass 1: the row's maximum, and the first round of the top-k select (a count of the
    //       keys by their top 8 bits) in the same loop; then the select's other rounds, the
    //       threshold t_k (the top_k-th largest logit).
    // TODO: the top-p threshold t_p: the same select, weighing each token >= t_k by its mass e_i,
    //       starting at the first digit where t_k's key and the maximum's differ; its first
    //       round's total is the kept mass.
    // TODO: the draw: the first kept token, in vocabulary order, whose cumulative probability
    //       exceeds uniforms[r] (the kept mass of each chunk of the row, then the tokens of the
    //       chunk that holds it); tokens[r].
}

void sample(const float* logits, const float* uniforms, int* tokens, int rows, int vocab,
            float temperature, int top_k, float top_p) {
    // TODO: one block of 1024 threads per row, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("sample: write sample_kernel and launch it, then delete this line");
}
