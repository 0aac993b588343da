// Checker of 09_quantization/gemv_w4a16: tests/gemv_checks.h with INT4 weights in pack_int4's
// format (a scale per group of 128). y = W x for 1 to 16 tokens against a double-precision CPU
// product; the format's accuracy; the bandwidth at one token, N = K = 8192, against a copy of W
// (the judged case) and at 16 tokens; both against cuBLAS's bf16 GEMM on bf16 weights; N = 2^20
// rows of 8192 (4 GiB of W, 2^33 nibbles).
#include <cstdint>

#include "gemv_checks.h"
#include "gemv_w4a16.h"

namespace {

class GemvW4a16 : public course::GpuTest {};

TEST_F(GemvW4a16, Shapes) { gemv::check_shapes(gemv_w4a16, gemv::Format::int4); }

// W 32 MiB: less than an H100's L2, which the timer flushes before each sample: W comes from
// device memory.
TEST_F(GemvW4a16, Bandwidth1Token) {
    gemv::time_against_copy(gemv_w4a16, gemv::Format::int4, 1, 8192, 8192, test_rng());
}
TEST_F(GemvW4a16, Bandwidth16Tokens) {
    gemv::time_against_copy(gemv_w4a16, gemv::Format::int4, 16, 8192, 8192, test_rng());
}
TEST_F(GemvW4a16, AgainstCublas1Token) {
    gemv::time_against_cublas(gemv_w4a16, gemv::Format::int4, 1, 8192, 8192, test_rng());
}
TEST_F(GemvW4a16, AgainstCublas16Tokens) {
    gemv::time_against_cublas(gemv_w4a16, gemv::Format::int4, 16, 8192, 8192, test_rng());
}

TEST_F(GemvW4a16, MoreThan2To32Nibbles) {
    gemv::check_past_int_range(gemv_w4a16, gemv::Format::int4, test_rng());
}

}  // namespace
