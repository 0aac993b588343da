// Checker of 10_inference/topk: values and indices against the CPU reference
// (course/reference/inference.h) on rows of 1 to 2^18 logits, k from 1 to 2048 and k == vocab,
// rows of 17 distinct values (ties everywhere, and at the threshold), a row of one value
// repeated, infinities and signed zeros, 1024 rows, and 64 rows of 2^18 (the contract's
// rows * vocab = 2^24); a failure names the known mistakes (ties at the threshold dropped or not
// the smallest indices, the right set not sorted, equal values not by index). Then the time
// against CUB's segmented radix sort of the same rows: 16 rows of 50304 with k 2048 (judged), 64
// rows of 128256 with k 2048 and 64 rows of 128256 with k 50 (shown), each as GB/s on the
// logits' bytes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/inference.h"
#include "course/testing.h"
#include "topk.h"

namespace {

namespace ref = course::reference;

constexpr float kInf = std::numeric_limits<float>::infinity();

// spread: uniform in [-8, 8); ties: 17 distinct values; constant: one value everywhere;
// extremes: ties plus infinities and signed zeros sprinkled in.
enum class Logits { spread, ties, constant, extremes };

struct Case {
    std::size_t rows, vocab, k;
    Logits logits = Logits::spread;
    std::string describe() const {
        const char* kinds[] = {"spread", "17 distinct values", "one value", "+-inf and +-0"};
        return std::to_string(rows) + " rows of " + std::to_string(vocab) + ", k " +
               std::to_string(k) + " (" + kinds[static_cast<int>(logits)] + ")";
    }
};

std::vector<float> make_logits(const Case& c, course::Rng& rng) {
    std::vector<float> logits(c.rows * c.vocab);
    for (float& l : logits) {
        l = rng.uniform(-8.0f, 8.0f);
        if (c.logits == Logits::ties || c.logits == Logits::extremes) l = std::round(l);
        if (c.logits == Logits::constant) l = 0.5f;
        if (c.logits == Logits::extremes) {
            const float specials[] = {kInf, -kInf, 0.0f, -0.0f};
            if (rng.uniform_int(0, 7) == 0) l = specials[rng.uniform_int(0, 3)];
        }
    }
    return logits;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// What is wrong with row r, in the contract's words; "" when the row is right or nothing fits.
std::string diagnose_row(const float* row, const Case& c, const int* got_indices,
                         const float* got_values, const std::vector<int>& want) {
    const std::size_t k = c.k;
    std::vector<int> got(got_indices, got_indices + k);
    if (got == want) {
        for (std::size_t j = 0; j < k; ++j)
            if (!same_bits(got_values[j], row[want[j]]))
                return "the indices are right and values[" + std::to_string(j) +
                       "] is not the logit at indices[" + std::to_string(j) + "]";
        return "";
    }
    const unsigned threshold = ref::ordered_key(row[want[k - 1]]);  // the k-th largest value
    std::size_t above = 0;  // the places of the values above it
    while (above < k && ref::ordered_key(row[want[above]]) > threshold) ++above;
    bool above_right = true;
    for (std::size_t j = 0; j < above; ++j) above_right &= got[j] == want[j];
    std::vector<int> sorted_got = got, sorted_want = want;
    std::sort(sorted_got.begin(), sorted_got.end());
    std::sort(sorted_want.begin(), sorted_want.end());
    if (sorted_got == sorted_want) {
        // The right tokens in the wrong order.
        for (std::size_t j = 1; j < k; ++j) {
            const unsigned a = ref::ordered_key(row[got[j - 1]]), b = ref::ordered_key(row[got[j]]);
            if (a < b)
                return "the right k tokens, not sorted: values[" + std::to_string(j - 1) +
                       "] = " + std::to_string(row[got[j - 1]]) + " comes before the larger " +
                       std::to_string(row[got[j]]) + " (topk.h promises largest first)";
        }
        return "the right k tokens and values in order, but equal values are not ordered by "
               "index: the smaller index first";
    }
    if (above_right) {
        std::size_t ties_got = 0;
        for (std::size_t j = above; j < k; ++j)
            ties_got += got[j] >= 0 && std::size_t(got[j]) < c.vocab &&
                        ref::ordered_key(row[got[j]]) == threshold;
        if (ties_got < k - above)
            return "the values above the k-th largest, " + std::to_string(row[want[k - 1]]) +
                   ", are right, and the tokens equal to it are missing (" +
                   std::to_string(ties_got) + " of " + std::to_string(k - above) +
                   "): keep the ties at the threshold, the smallest indices first";
        return "the tokens equal to the k-th largest value, " + std::to_string(row[want[k - 1]]) +
               ", are not the ones with the smallest indices (where more tie than fit, the "
               "smallest indices are kept, in increasing order)";
    }
    return "";
}

void check_case(const Case& c, course::Rng& rng) {
    SCOPED_TRACE(c.describe());
    const auto logits = make_logits(c, rng);
    std::vector<int> want_indices;
    std::vector<float> want_values;
    for (std::size_t r = 0; r < c.rows; ++r) {
        const float* row = &logits[r * c.vocab];
        const auto top = ref::topk_indices(row, c.vocab, c.k);
        for (int i : top) want_values.push_back(row[i]);
        want_indices.insert(want_indices.end(), top.begin(), top.end());
    }
    course::DeviceBuffer<float> d_logits("logits", logits), values("values", c.rows * c.k);
    course::DeviceBuffer<int> indices("indices", c.rows * c.k);
    topk(d_logits.data(), values.data(), indices.data(), static_cast<int>(c.rows),
         static_cast<int>(c.vocab), static_cast<int>(c.k));
    const auto got_values = values.download();
    const auto got_indices = indices.download();

    const auto diagnose = [&]() -> std::string {
        for (std::size_t r = 0; r < c.rows; ++r) {
            const std::vector<int> want(want_indices.begin() + r * c.k,
                                        want_indices.begin() + (r + 1) * c.k);
            const auto why = diagnose_row(&logits[r * c.vocab], c, &got_indices[r * c.k],
                                          &got_values[r * c.k], want);
            if (!why.empty()) return "row " + std::to_string(r) + ": " + why;
        }
        return "";
    };
    course::CompareOptions index_options{"indices"};
    index_options.matrix = course::Matrix{c.rows, c.k};
    index_options.diagnose = diagnose;
    EXPECT_TRUE(course::expect_equal(got_indices, want_indices, index_options));
    // The values are the logits themselves: equal bits (-0.0 is not +0.0).
    std::vector<std::uint32_t> got_bits(got_values.size()), want_bits(want_values.size());
    std::memcpy(got_bits.data(), got_values.data(), 4 * got_bits.size());
    std::memcpy(want_bits.data(), want_values.data(), 4 * want_bits.size());
    course::CompareOptions value_options{"values (their bits)"};
    value_options.matrix = course::Matrix{c.rows, c.k};
    value_options.diagnose = diagnose;
    EXPECT_TRUE(course::expect_equal(got_bits, want_bits, value_options));
}

class TopK : public course::GpuTest {};

// A few rows, so that a mistake of the row offset shows; k around the block and warp sizes.
TEST_F(TopK, EdgeSizes) {
    auto rng = test_rng();
    check_case({3, 1000, 50}, rng);
    check_case({5, 1, 1}, rng);
    check_case({5, 33, 33}, rng);  // k == vocab: the whole row, sorted
    check_case({4, 1000, 1}, rng);
    check_case({4, 1000, 31}, rng);
    check_case({4, 3000, 1025}, rng);
    check_case({2, 2048, 2048}, rng);
}

// Ties at the threshold: more tokens equal to the k-th value than places left.
TEST_F(TopK, Ties) {
    auto rng = test_rng();
    check_case({4, 1000, 100, Logits::ties}, rng);
    check_case({3, 5000, 2048, Logits::ties}, rng);
    check_case({3, 777, 64, Logits::constant}, rng);
    // One value: the top k are the first k tokens, all in one block's share of a row split over
    // several blocks.
    check_case({2, 20000, 2048, Logits::constant}, rng);
    check_case({4, 1000, 300, Logits::extremes}, rng);
}

// GPT-2's and Llama 3's vocabularies, and the contract's limits.
TEST_F(TopK, LargeRows) {
    auto rng = test_rng();
    check_case({2, 50304, 2048}, rng);
    check_case({2, 128256, 50, Logits::ties}, rng);
    check_case({1, 262144, 2048}, rng);
}

// 1024 rows, and rows * vocab = 2^24.
TEST_F(TopK, LargestShapes) {
    COURSE_SKIP_ON_EMULATOR("1024 rows, and 64 rows of 2^18");
    auto rng = test_rng();
    check_case({1024, 64, 7}, rng);
    check_case({64, 262144, 2048}, rng);
}

// ---- Timed cases ----

// Logits made on the device from a hash; each row's top k checked against the reference.
void time_against_cub(std::size_t rows, std::size_t vocab, std::size_t k, course::Rng rng) {
    COURSE_SKIP_ON_EMULATOR("a timed case");
    const std::size_t n = rows * vocab;
    COURSE_REQUIRE_MEMORY(12 * n + (256u << 20));
    const std::string label =
        std::to_string(rows) + "x" + std::to_string(vocab) + " k" + std::to_string(k);
    SCOPED_TRACE(label);
    const std::uint64_t seed = rng.next_u64();
    course::DeviceBuffer<float> logits("logits", n), sorted("sorted", n);
    course::DeviceBuffer<int> sorted_indices("sorted_indices", n);
    course::fill_uniform(logits.data(), n, seed, -8.0f, 8.0f);
    course::DeviceBuffer<float> values("values", rows * k);
    course::DeviceBuffer<int> indices("indices", rows * k);

    const auto timing = course::time_against(
        [&] { topk(logits.data(), values.data(), indices.data(), int(rows), int(vocab), int(k)); },
        [&] {
            course::baseline::cub_segmented_sort_descending(
                logits.data(), sorted.data(), sorted_indices.data(), int(rows), int(vocab));
        },
        {course::TimedOutput(values), course::TimedOutput(indices)},
        // The logits negated on the second input set: its top k are the first set's bottom k.
        {course::TimedInput(logits)});

    std::vector<int> want;
    std::vector<float> row(vocab);
    for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t i = 0; i < vocab; ++i)
            row[i] = course::hashed::uniform(r * vocab + i, seed, -8.0f, 8.0f);
        const auto top = ref::topk_indices(row.data(), vocab, k);
        want.insert(want.end(), top.begin(), top.end());
    }
    course::CompareOptions options{"indices"};
    options.matrix = course::Matrix{rows, k};
    ASSERT_TRUE(course::expect_equal(indices.download(), want, options));
    // Both read the logits once; the sort also writes them back sorted, with indices: the same
    // bytes counted for both, so the ratio is the ratio of the times.
    course::record_bandwidth(label, timing, 4.0 * n, "cub_segmented_sort", 4.0 * n);
}

// The issue's shape: GPT-2's vocabulary, 16 rows, k 2048 (judged).
TEST_F(TopK, Time16x50304k2048) { time_against_cub(16, 50304, 2048, test_rng()); }
// Llama 3's, 64 rows, k 2048 and k 50 (shown).
TEST_F(TopK, Time64x128256k2048) { time_against_cub(64, 128256, 2048, test_rng()); }
TEST_F(TopK, Time64x128256k50) { time_against_cub(64, 128256, 50, test_rng()); }

}  // namespace
