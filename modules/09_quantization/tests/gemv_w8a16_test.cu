// Checker of 09_quantization/gemv_w8a16: tests/gemv_checks.h with INT8 weights (a scale per row).
// y = W x for 1 to 16 tokens against a double-precision CPU product; the format's accuracy; the
// bandwidth at one token, N = K = 8192, against a copy of W (the judged case) and at 16 tokens;
// both against cuBLAS's bf16 GEMM on bf16 weights; N = 2^20 rows of 4096 (4 GiB of W).
#include <cstdint>

#include "gemv_checks.h"
#include "gemv_w8a16.h"

namespace {

void run(int M, int N, int K, const __nv_bfloat16* x, const std::uint8_t* W, const float* scales,
         float* y) {
    gemv_w8a16(M, N, K, x, reinterpret_cast<const std::int8_t*>(W), scales, y);
}

class GemvW8a16 : public course::GpuTest {};

TEST_F(GemvW8a16, Shapes) { gemv::check_shapes(run, gemv::Format::int8); }

// W 64 MiB, far above the L2: the decode GEMV of a 7B model's largest layers.
TEST_F(GemvW8a16, Bandwidth1Token) {
    gemv::time_against_copy(run, gemv::Format::int8, 1, 8192, 8192, test_rng());
}
TEST_F(GemvW8a16, Bandwidth16Tokens) {
    gemv::time_against_copy(run, gemv::Format::int8, 16, 8192, 8192, test_rng());
}
TEST_F(GemvW8a16, AgainstCublas1Token) {
    gemv::time_against_cublas(run, gemv::Format::int8, 1, 8192, 8192, test_rng());
}
TEST_F(GemvW8a16, AgainstCublas16Tokens) {
    gemv::time_against_cublas(run, gemv::Format::int8, 16, 8192, 8192, test_rng());
}

TEST_F(GemvW8a16, MoreThan2To31Bytes) {
    gemv::check_past_int_range(run, gemv::Format::int8, test_rng());
}

}  // namespace
