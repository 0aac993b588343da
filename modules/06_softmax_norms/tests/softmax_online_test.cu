// Checker of 06_softmax_norms/softmax_online: row lengths around every boundary (warp rows, block
// rows, scalar and float4 paths), many rows, one dominant entry at each boundary position, inputs
// that overflow a naive exp and -inf entries, pointers that are not 16-byte aligned; then the
// bandwidth at 16384 x 4096 and 4096 x 50304 next to a device copy, and next to cuDNN's softmax.
// The contract's extremes: 2^20 rows, and last rows x cols just below 2^31.
#include "softmax_checks.h"
#include "softmax_online.h"

namespace {

class SoftmaxOnline : public course::GpuTest {};

TEST_F(SoftmaxOnline, EdgeColumns) {
    auto rng = test_rng();
    softmax_checks::edge_columns(softmax_online, rng);
}

TEST_F(SoftmaxOnline, ManyRows) {
    auto rng = test_rng();
    softmax_checks::many_rows(softmax_online, rng);
}

TEST_F(SoftmaxOnline, MostRows) {
    auto rng = test_rng();
    softmax_checks::most_rows(softmax_online, rng);
}

TEST_F(SoftmaxOnline, DominantElementAtBoundaries) {
    auto rng = test_rng();
    softmax_checks::dominant_element(softmax_online, rng);
}

TEST_F(SoftmaxOnline, ExtremeInputs) {
    auto rng = test_rng();
    softmax_checks::extreme_inputs(softmax_online, rng);
}

TEST_F(SoftmaxOnline, MisalignedPointers) {
    auto rng = test_rng();
    softmax_checks::misaligned(softmax_online, rng);
}

// Attention-sized rows: 16384 x 4096 floats, 256 MiB each for in and out.
TEST_F(SoftmaxOnline, Bandwidth16384x4096) {
    auto rng = test_rng();
    softmax_checks::perf(softmax_online, 16384, 4096, softmax_checks::Baseline::copy, rng);
}

// Vocabulary-sized rows (the logits of 4096 tokens, GPT-2's 50304 columns): 786 MiB each.
TEST_F(SoftmaxOnline, Bandwidth4096x50304) {
    auto rng = test_rng();
    softmax_checks::perf(softmax_online, 4096, 50304, softmax_checks::Baseline::copy, rng);
}

// The same vocabulary-sized case against cuDNN's softmax (skipped where cuDNN is missing).
TEST_F(SoftmaxOnline, VersusCudnn4096x50304) {
    auto rng = test_rng();
    softmax_checks::perf(softmax_online, 4096, 50304, softmax_checks::Baseline::cudnn, rng);
}

// The contract's largest: rows * cols just below 2^31 (a large case, last).
TEST_F(SoftmaxOnline, Largest) {
    auto rng = test_rng();
    softmax_checks::largest(softmax_online, rng);
}

}  // namespace
