// Checker of 06_softmax_norms/softmax_causal: sequence lengths around every boundary (register
// rows up to 1024, block rows beyond, scalar and float4 paths), several scales, many heads,
// scores that overflow a naive exp and a dominant score on the diagonal or in column 0, pointers
// that are not 16-byte aligned. Scores above the diagonal are NaN (but in the largest case): a
// kernel that lets one of them into its maximum or its sum produces NaN. Then the bandwidth at
// GPT-2's shape (96 heads of 1024 x 1024) and at a long context (8 heads of 4096 x 4096) next to a
// device copy. The contract's extremes: 2^20 heads, and last 127 x 4096 x 4096 scores, just below
// 2^31.
#include <cmath>
#include <limits>

#include "softmax_causal.h"
#include "softmax_checks.h"

namespace {

class SoftmaxCausal : public course::GpuTest {};

// batch_heads stacked T x T matrices of scores in [lo, hi], NaN above the diagonal.
std::vector<float> causal_scores(std::size_t batch_heads, std::size_t T, float lo, float hi,
                                 course::Rng& rng) {
    auto scores = course::random_floats(batch_heads * T * T, lo, hi, rng);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (std::size_t r = 0; r < batch_heads * T; ++r)
        for (std::size_t j = r % T + 1; j < T; ++j) scores[r * T + j] = nan;
    return scores;
}

// max |scale * s| over the live scores: the tolerance allows for rounding scale * s (see
// softmax_tolerance).
double largest_scaled_score(const std::vector<float>& scores, std::size_t T, float scale) {
    double largest = 0.0;
    for (std::size_t r = 0; r < scores.size() / T; ++r)
        for (std::size_t j = 0; j <= r % T; ++j)
            largest = std::max(largest, std::fabs(static_cast<double>(scale) * scores[r * T + j]));
    return largest;
}

// Runs softmax_causal (optionally on pointers one float past an aligned address) and checks
// every row: a distribution over columns 0..i, exact zeros after, close to the reference.
void check_causal(const std::vector<float>& scores, std::size_t batch_heads, std::size_t T,
                  float scale, std::size_t offset = 0) {
    const std::size_t n = batch_heads * T * T, rows = batch_heads * T;
    std::vector<float> padded(offset, 0.0f);
    padded.insert(padded.end(), scores.begin(), scores.end());
    course::DeviceBuffer<float> d_scores("scores", padded), d_probs("probs", n + offset);
    softmax_causal(d_scores.data() + offset, d_probs.data() + offset, static_cast<int>(batch_heads),
                   static_cast<int>(T), scale);
    const auto padded_got = d_probs.download();
    for (std::size_t k = 0; k < offset; ++k)
        EXPECT_TRUE(course::is_poison(padded_got[k]))
            << "wrote before the start of `probs`: the float " << offset - k
            << " before probs[0] changed";
    const std::vector<float> got(padded_got.begin() + offset, padded_got.end());

    const auto tol = softmax_checks::softmax_tolerance(T, largest_scaled_score(scores, T, scale));
    EXPECT_TRUE(softmax_checks::rows_are_distributions(got, rows, T, tol, "probs",
                                                       [T](std::size_t r) { return r % T + 1; }));
    EXPECT_TRUE(
        course::expect_close(got, course::reference::softmax_causal(scores, batch_heads, T, scale),
                             tol, {"probs", course::Matrix{rows, T}}));
}

std::string shape(std::size_t batch_heads, std::size_t T, float scale) {
    return "batch_heads = " + std::to_string(batch_heads) + ", T = " + std::to_string(T) +
           ", scale = " + softmax_checks::number(scale);
}

TEST_F(SoftmaxCausal, EdgeLengths) {
    auto rng = test_rng();
    const float scale = 1.0f / std::sqrt(48.0f);  // a head dimension of 48
    // 1: a single live score; 7, 31, 33, 100, 1023: not multiples of 4 (scalar path); 32, 1000,
    // 1024: float4, up to the longest row a warp keeps in registers; 1025 and beyond: a block per
    // row; 2051 and 4099: long and odd.
    for (std::size_t T : {1, 7, 31, 32, 33, 100, 1000, 1023, 1024, 1025, 2048, 2051, 4099}) {
        const std::size_t batch_heads = T <= 1024 ? 3 : T <= 2051 ? 2 : 1;
        SCOPED_TRACE(shape(batch_heads, T, scale));
        check_causal(causal_scores(batch_heads, T, -10.0f, 10.0f, rng), batch_heads, T, scale);
    }
}

TEST_F(SoftmaxCausal, ScaleIsApplied) {
    auto rng = test_rng();
    for (float scale : {1.0f, 0.125f, 2.5f}) {
        for (std::size_t T : {64, 1500}) {
            SCOPED_TRACE(shape(2, T, scale));
            check_causal(causal_scores(2, T, -4.0f, 4.0f, rng), 2, T, scale);
        }
    }
}

// Many rows of short heads: many blocks, the last one partly used (97 * 33 rows).
TEST_F(SoftmaxCausal, ManyHeads) {
    auto rng = test_rng();
    for (std::size_t T : {33, 64}) {
        SCOPED_TRACE(shape(97, T, 0.125f));
        check_causal(causal_scores(97, T, -10.0f, 10.0f, rng), 97, T, 0.125f);
    }
}

// 2^20 heads of T = 2: more than the 65535 blocks a grid holds along y (a block per head there
// fails).
TEST_F(SoftmaxCausal, MostHeads) {
    COURSE_SKIP_ON_EMULATOR("2^20 heads");
    auto rng = test_rng();
    const std::size_t heads = std::size_t{1} << 20, T = 2;
    SCOPED_TRACE(shape(heads, T, 0.125f));
    check_causal(causal_scores(heads, T, -10.0f, 10.0f, rng), heads, T, 0.125f);
}

// Five heads: scores spread over +-1e4, all 1e4, all -1e4, 1e4 on the diagonal (the last live
// column of each row), 1e4 in column 0. Without the maximum subtracted, expf overflows; with a
// row's first or last live column left out of the maximum or the sum, the result is inf or NaN.
TEST_F(SoftmaxCausal, ExtremeScores) {
    auto rng = test_rng();
    const float scale = 0.125f;
    for (std::size_t T : {33, 1000, 1027}) {
        const std::size_t heads = 5, head = T * T;
        auto scores = causal_scores(heads, T, -10.0f, 10.0f, rng);
        const auto spread = causal_scores(1, T, -1e4f, 1e4f, rng);
        std::copy(spread.begin(), spread.end(), scores.begin());
        for (std::size_t i = 0; i < T; ++i) {
            for (std::size_t j = 0; j <= i; ++j) {
                scores[1 * head + i * T + j] = 1e4f;
                scores[2 * head + i * T + j] = -1e4f;
            }
            scores[3 * head + i * T + i] = 1e4f;
            scores[4 * head + i * T] = 1e4f;
        }
        SCOPED_TRACE(
            shape(heads, T, scale) +
            "; heads: +-1e4 spread, all 1e4, all -1e4, 1e4 on the diagonal, 1e4 in column 0");
        check_causal(scores, heads, T, scale);
    }
}

TEST_F(SoftmaxCausal, MisalignedPointers) {
    auto rng = test_rng();
    for (std::size_t T : {1024, 2048}) {
        SCOPED_TRACE(shape(2, T, 0.125f) + "; scores and probs one float past an aligned address");
        check_causal(causal_scores(2, T, -10.0f, 10.0f, rng), 2, T, 0.125f, 1);
    }
}

void causal_bandwidth(std::size_t batch_heads, std::size_t T, course::Rng& rng) {
    const std::size_t n = batch_heads * T * T, rows = batch_heads * T;
    // scores, probs, the copy's destination and the harness's two copies of probs.
    COURSE_REQUIRE_MEMORY(5 * n * sizeof(float) + (512u << 20));
    const float scale = 0.125f;  // head dimension 64
    const auto scores = causal_scores(batch_heads, T, -10.0f, 10.0f, rng);
    course::DeviceBuffer<float> d_scores("scores", scores), d_probs("probs", n), d_copy("copy", n);
    const int heads = static_cast<int>(batch_heads), length = static_cast<int>(T);
    const auto tol = softmax_checks::softmax_tolerance(T, 10.0 * scale);

    const auto timing = course::time_against(
        [&] { softmax_causal(d_scores.data(), d_probs.data(), heads, length, scale); },
        [&] { course::baseline::device_copy(d_copy.data(), d_scores.data(), n * sizeof(float)); },
        {course::TimedOutput(d_probs, tol)}, {course::TimedInput(d_scores)});

    const auto got = d_probs.download();
    EXPECT_TRUE(softmax_checks::rows_are_distributions(got, rows, T, tol, "probs",
                                                       [T](std::size_t r) { return r % T + 1; }));
    EXPECT_TRUE(softmax_checks::sampled_rows_match(
        got, rows, T, tol, "probs",
        [&](std::size_t r) {
            return course::reference::softmax_causal_row(scores.data() + r * T, r % T, T, scale);
        },
        rng));

    // What must move per head: the live scores, T (T + 1) / 2 floats read (the masked half is
    // never needed), and all T * T probabilities written. The copy reads and writes T * T floats.
    const double live = static_cast<double>(T) * (T + 1) / 2;
    const double bytes =
        static_cast<double>(batch_heads) * (live + static_cast<double>(T) * T) * sizeof(float);
    course::record_bandwidth(
        std::to_string(batch_heads) + "x" + std::to_string(T) + "x" + std::to_string(T), timing,
        bytes, "copy", 2.0 * sizeof(float) * n);
}

// GPT-2 small: batch 8 x 12 heads, T = 1024 (403 MB of scores).
TEST_F(SoftmaxCausal, Bandwidth96x1024x1024) {
    auto rng = test_rng();
    causal_bandwidth(96, 1024, rng);
}

// A long context: 8 heads of T = 4096 (537 MB of scores).
TEST_F(SoftmaxCausal, Bandwidth8x4096x4096) {
    auto rng = test_rng();
    causal_bandwidth(8, 4096, rng);
}

// The contract's batch_heads * T * T < 2^31 at its end: 127 heads of T = 4096, 2^31 - 2^24
// floats, past 2^30 (4 bytes each: a byte offset held in 32 bits wraps, at element 2^29 when
// signed). The scores are made on the device (finite above the diagonal too: the other cases put
// NaN there); whole rows are compared. A large case: last.
TEST_F(SoftmaxCausal, Largest) {
    const std::size_t heads = 127, T = 4096, n = heads * T * T, rows = heads * T;
    COURSE_LARGE_CASE(2 * n * sizeof(float) + (64u << 20));
    const float scale = 0.125f;
    SCOPED_TRACE(shape(heads, T, scale) + " (2^31 - 2^24 elements), scores made on the device");
    auto rng = test_rng();
    const std::uint64_t seed = rng.next_u64();
    course::DeviceBuffer<float> d_scores("scores", n), d_probs("probs", n);
    course::fill_uniform(d_scores.data(), n, seed, -10.0f, 10.0f);
    course::run_large_case([&] {
        softmax_causal(d_scores.data(), d_probs.data(), static_cast<int>(heads),
                       static_cast<int>(T), scale);
    });
    const auto reference = [&](const course::Window& w) {  // whole rows
        std::vector<double> want;
        std::vector<float> row(T);
        for (std::size_t r = w.first / T; r < (w.first + w.count) / T; ++r) {
            for (std::size_t j = 0; j < T; ++j)
                row[j] = course::hashed::uniform(r * T + j, seed, -10.0f, 10.0f);
            const auto p = course::reference::softmax_causal_row(row.data(), r % T, T, scale);
            want.insert(want.end(), p.begin(), p.end());
        }
        return want;
    };
    EXPECT_TRUE(course::expect_windows_close(
        d_probs, course::rows_past_int_range(rows, T, rng), reference,
        softmax_checks::softmax_tolerance(T, 10.0 * scale), {"probs"}));
}

}  // namespace
