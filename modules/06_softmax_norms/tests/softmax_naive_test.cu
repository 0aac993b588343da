// Checker of 06_softmax_norms/softmax_naive: row lengths around every boundary, many rows, one
// dominant entry at each boundary position, inputs that overflow a naive exp and -inf entries;
// then the bandwidth at 16384 x 4096 and 4096 x 50304 next to a device copy. No target: a thread
// per row is the starting point the next exercises are measured from.
// The contract's extremes: 2^20 rows, and last rows x cols just below 2^31.
#include "softmax_checks.h"
#include "softmax_naive.h"

namespace {

class SoftmaxNaive : public course::GpuTest {};

TEST_F(SoftmaxNaive, EdgeColumns) {
    auto rng = test_rng();
    softmax_checks::edge_columns(softmax_naive, rng);
}

TEST_F(SoftmaxNaive, ManyRows) {
    auto rng = test_rng();
    softmax_checks::many_rows(softmax_naive, rng);
}

TEST_F(SoftmaxNaive, MostRows) {
    auto rng = test_rng();
    softmax_checks::most_rows(softmax_naive, rng);
}

TEST_F(SoftmaxNaive, DominantElementAtBoundaries) {
    auto rng = test_rng();
    softmax_checks::dominant_element(softmax_naive, rng);
}

TEST_F(SoftmaxNaive, ExtremeInputs) {
    auto rng = test_rng();
    softmax_checks::extreme_inputs(softmax_naive, rng);
}

// Attention-sized rows: 16384 x 4096 floats, 256 MiB each for in and out.
TEST_F(SoftmaxNaive, Bandwidth16384x4096) {
    auto rng = test_rng();
    softmax_checks::perf(softmax_naive, 16384, 4096, softmax_checks::Baseline::copy, rng);
}

// Vocabulary-sized rows (the logits of 4096 tokens, GPT-2's 50304 columns): 786 MiB each.
TEST_F(SoftmaxNaive, Bandwidth4096x50304) {
    auto rng = test_rng();
    softmax_checks::perf(softmax_naive, 4096, 50304, softmax_checks::Baseline::copy, rng);
}

// The contract's largest: rows * cols just below 2^31 (a large case, last).
TEST_F(SoftmaxNaive, Largest) {
    auto rng = test_rng();
    softmax_checks::largest(softmax_naive, rng);
}

}  // namespace
