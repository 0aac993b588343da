// Checker of 10_inference/sample: tokens drawn from fixed uniforms against the double CPU
// reference (course/reference/inference.h), on rows whose uniforms and top_p lie at least 1e-4
// away from every boundary where rounding could pick a neighbour: vocabularies of 1 to 128256,
// plain sampling, temperature, top-k (with ties at the k-th logit), top-p, both, greedy (top_k 1),
// -inf logits; a failure names the known mistakes (the crossing token dropped, ties at the k-th
// logit dropped, the nucleus taken over the whole row instead of the top-k, the temperature
// forgotten). Then the distribution: 65536 draws from one row, a chi-square test of the counts
// against the target probabilities (false alarm 1e-6). Then the bandwidth on the logits' bytes
// at 64 rows of 128256 (top-k and top-p) and 16 rows of 50304 (top-k 2048), against a device copy
// of them (shown, not judged).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/inference.h"
#include "course/testing.h"
#include "sample.h"

namespace {

namespace ref = course::reference;

// How far from a boundary a draw and top_p must lie (sample.h): float32 exp and sums, or fixed
// point, move a cumulative probability by far less.
constexpr double kMargin = 1e-4;

enum class Logits { spread, ties, masked, peaked };

struct Case {
    std::size_t rows, vocab;
    ref::SamplingParams params;
    Logits logits = Logits::spread;
    std::string describe() const {
        const char* kinds[] = {"spread", "with ties", "a third -inf", "32 peaks"};
        return std::to_string(rows) + " rows of " + std::to_string(vocab) + " logits (" +
               kinds[static_cast<int>(logits)] + "), temperature " +
               std::to_string(params.temperature) + ", top_k " + std::to_string(params.top_k) +
               ", top_p " + std::to_string(params.top_p);
    }
};

std::vector<float> random_row(std::size_t vocab, Logits kind, course::Rng& rng) {
    std::vector<float> row(vocab);
    for (float& l : row) {
        l = rng.uniform(-4.0f, 4.0f);
        if (kind == Logits::ties) l = std::round(l * 2.0f) / 2.0f;  // 17 values: ties everywhere
        if (kind == Logits::masked && rng.uniform_int(0, 2) == 0)
            l = -std::numeric_limits<float>::infinity();
    }
    // Peaked: 32 tokens far above the rest, as a language model's few likely next tokens, so
    // that draws and nuclei of a large vocabulary can lie away from the boundaries of the
    // tail's thousands of tiny probabilities.
    if (kind == Logits::peaked)
        for (int i = 0; i < 32; ++i)
            row[rng.uniform_int(0, std::int64_t(vocab) - 1)] = rng.uniform(10.0f, 14.0f);
    if (kind == Logits::masked) row[rng.uniform_int(0, std::int64_t(vocab) - 1)] = 1.0f;
    return row;
}

// ---- The known mistakes, as distributions ----

enum class Variant { crossing_dropped, top_k_ties_dropped, nucleus_of_whole_row, no_temperature };

// The distribution a kernel with the mistake `variant` draws from.
std::vector<double> variant_distribution(const float* row, std::size_t vocab,
                                         ref::SamplingParams params, Variant variant) {
    if (variant == Variant::no_temperature) {
        params.temperature = 1.0f;
        return ref::sampling_distribution(row, vocab, params);
    }
    if (variant == Variant::nucleus_of_whole_row) {
        // The nucleus's mass counted over every token, the top-k cut applied after it.
        auto p = ref::sampling_distribution(row, vocab, {params.temperature, 0, params.top_p});
        auto k = ref::sampling_distribution(row, vocab, {params.temperature, params.top_k, 1.0f});
        double sum = 0.0;
        for (std::size_t i = 0; i < vocab; ++i) sum += p[i] = k[i] > 0.0 ? p[i] : 0.0;
        if (sum == 0.0) return k;
        for (double& v : p) v /= sum;
        return p;
    }
    std::vector<double> p = ref::sampling_distribution(row, vocab, params);
    if (variant == Variant::top_k_ties_dropped) {
        // Exactly top_k tokens: those tied at the k-th logit kept in vocabulary order only.
        if (params.top_k <= 0 || std::size_t(params.top_k) >= vocab) return p;
        std::vector<std::size_t> order(vocab);
        for (std::size_t i = 0; i < vocab; ++i) order[i] = i;
        std::stable_sort(order.begin(), order.end(),
                         [&](std::size_t a, std::size_t b) { return row[a] > row[b]; });
        std::vector<float> cut(row, row + vocab);
        for (std::size_t r = params.top_k; r < vocab; ++r)
            cut[order[r]] = -std::numeric_limits<float>::infinity();
        return ref::sampling_distribution(cut.data(), vocab, {params.temperature, 0, params.top_p});
    }
    // crossing_dropped: the nucleus without the token whose mass crosses top_p (and its ties).
    if (params.top_p >= 1.0f) return p;
    float lowest = std::numeric_limits<float>::infinity();
    for (std::size_t i = 0; i < vocab; ++i)
        if (p[i] > 0.0) lowest = std::min(lowest, row[i]);
    double sum = 0.0;
    for (std::size_t i = 0; i < vocab; ++i) sum += p[i] = row[i] > lowest ? p[i] : 0.0;
    if (sum == 0.0) return ref::sampling_distribution(row, vocab, params);
    for (double& v : p) v /= sum;
    return p;
}

std::string variant_message(Variant variant) {
    switch (variant) {
        case Variant::crossing_dropped:
            return "the nucleus lacks the token whose probability carries the sum past top_p: "
                   "t_p is the largest logit v whose tokens with l >= v hold AT LEAST top_p of "
                   "the mass, the crossing token included";
        case Variant::top_k_ties_dropped:
            return "exactly top_k tokens were kept: the tokens tied with the top_k-th largest "
                   "logit are all kept (keep l >= t_k)";
        case Variant::nucleus_of_whole_row:
            return "the nucleus was measured against the whole row's mass: top-p applies to the "
                   "tokens top-k kept, Z is their sum";
        case Variant::no_temperature:
            return "the draws ignore the temperature: the weights are exp((l - max) / "
                   "temperature)";
    }
    return "";
}

// ---- Fixed draws against the reference ----

void check_case(const Case& c, course::Rng& rng) {
    SCOPED_TRACE(c.describe());
    std::vector<float> logits, uniforms;
    std::vector<int> want;
    std::vector<std::vector<double>> distributions;
    for (std::size_t r = 0; r < c.rows; ++r) {
        std::vector<float> row;
        std::vector<double> p;
        for (int attempt = 0;; ++attempt) {
            ASSERT_LT(attempt, 200) << "no row of logits with top_p away from its boundaries";
            row = random_row(c.vocab, c.logits, rng);
            if (ref::top_p_margin(row.data(), c.vocab, c.params) < kMargin) continue;
            p = ref::sampling_distribution(row.data(), c.vocab, c.params);
            break;
        }
        float u = 0.0f;
        for (int attempt = 0;; ++attempt) {
            ASSERT_LT(attempt, 1000) << "no uniform away from the boundaries";
            u = rng.uniform(0.0f, 1.0f);
            if (ref::draw_margin(p, u) >= kMargin) break;
        }
        logits.insert(logits.end(), row.begin(), row.end());
        uniforms.push_back(u);
        want.push_back(ref::draw(p, u));
        distributions.push_back(std::move(p));
    }
    course::DeviceBuffer<float> d_logits("logits", logits), d_uniforms("uniforms", uniforms);
    course::DeviceBuffer<int> d_tokens("tokens", c.rows);
    sample(d_logits.data(), d_uniforms.data(), d_tokens.data(), static_cast<int>(c.rows),
           static_cast<int>(c.vocab), c.params.temperature, c.params.top_k, c.params.top_p);
    const auto got = d_tokens.download();

    course::CompareOptions options{"tokens (index = row)"};
    options.diagnose = [&]() -> std::string {
        for (std::size_t r = 0; r < c.rows; ++r)
            if (got[r] >= 0 && std::size_t(got[r]) < c.vocab && distributions[r][got[r]] == 0.0)
                return "row " + std::to_string(r) + " drew token " + std::to_string(got[r]) +
                       ", whose probability is 0 (cut by top-k or top-p, or a -inf logit)";
        for (Variant v : {Variant::crossing_dropped, Variant::top_k_ties_dropped,
                          Variant::nucleus_of_whole_row, Variant::no_temperature}) {
            bool all = true;
            for (std::size_t r = 0; r < c.rows && all; ++r) {
                const auto q =
                    variant_distribution(logits.data() + r * c.vocab, c.vocab, c.params, v);
                all = ref::draw(q, uniforms[r]) == got[r];
            }
            if (all) return "likely cause: " + variant_message(v);
        }
        return "";
    };
    EXPECT_TRUE(course::expect_equal(got, want, options));
}

class Sample : public course::GpuTest {};

// Plain sampling and temperature: from one token to GPT-2's and Llama 3's vocabularies.
TEST_F(Sample, Temperature) {
    auto rng = test_rng();
    for (std::size_t vocab : {1, 2, 33, 1000}) check_case({9, vocab, {1.0f, 0, 1.0f}}, rng);
    check_case({5, 50304, {0.7f, 0, 1.0f}, Logits::peaked}, rng);
    check_case({3, 128256, {1.5f, 0, 1.0f}, Logits::peaked}, rng);
}

// top-k: k around a block of threads, ties at the k-th logit, k = 1 (greedy), k >= vocab (off).
TEST_F(Sample, TopK) {
    auto rng = test_rng();
    check_case({9, 1000, {1.0f, 50, 1.0f}}, rng);
    check_case({9, 1000, {0.8f, 40, 1.0f}, Logits::ties}, rng);
    check_case({9, 777, {1.0f, 1, 1.0f}}, rng);
    check_case({5, 300, {1.0f, 300, 1.0f}}, rng);
    check_case({5, 50304, {1.0f, 2048, 1.0f}}, rng);
}

// top-p alone: a wide nucleus, a narrow one, ties at its edge, a peaked row.
TEST_F(Sample, TopP) {
    auto rng = test_rng();
    check_case({9, 1000, {1.0f, 0, 0.9f}}, rng);
    check_case({9, 1000, {1.0f, 0, 0.3f}, Logits::ties}, rng);
    check_case({9, 513, {0.6f, 0, 0.95f}, Logits::peaked}, rng);
    check_case({3, 128256, {1.0f, 0, 0.8f}, Logits::peaked}, rng);
}

// Both cuts, the nucleus taken within the top k; -inf logits (banned tokens).
TEST_F(Sample, TopKAndTopP) {
    auto rng = test_rng();
    check_case({9, 1000, {0.8f, 100, 0.7f}}, rng);
    check_case({9, 1000, {1.0f, 30, 0.5f}, Logits::ties}, rng);
    check_case({9, 1000, {1.0f, 500, 0.9f}, Logits::masked}, rng);
    check_case({5, 50304, {0.9f, 50, 0.95f}}, rng);
}

// ---- The distribution ----

// `draws` tokens from copies of one row, each with its own uniform; their counts against the
// target distribution (ref::chi_square: rare tokens pooled, a false alarm once in a million).
void check_distribution(std::size_t vocab, ref::SamplingParams params, Logits kind,
                        std::size_t draws, course::Rng& rng) {
    const auto row = random_row(vocab, kind, rng);
    const auto p = ref::sampling_distribution(row.data(), vocab, params);
    std::vector<float> logits(draws * vocab);
    for (std::size_t r = 0; r < draws; ++r) std::copy(row.begin(), row.end(), &logits[r * vocab]);
    const auto uniforms = course::random_floats(draws, 0.0f, 1.0f, rng);
    course::DeviceBuffer<float> d_logits("logits", logits), d_uniforms("uniforms", uniforms);
    course::DeviceBuffer<int> d_tokens("tokens", draws);
    sample(d_logits.data(), d_uniforms.data(), d_tokens.data(), static_cast<int>(draws),
           static_cast<int>(vocab), params.temperature, params.top_k, params.top_p);
    const auto got = d_tokens.download();

    std::vector<std::size_t> counts(vocab, 0);
    for (int token : got) {
        ASSERT_TRUE(token >= 0 && std::size_t(token) < vocab)
            << "a token outside [0, vocab): " << token;
        ASSERT_GT(p[token], 0.0) << "drew token " << token
                                 << ", whose probability is 0 (cut by top-k or top-p)";
        ++counts[token];
    }
    const auto result = ref::chi_square(counts, p, draws);
    ASSERT_GE(result.bins, 2) << "the row keeps fewer than 2 tokens: nothing to test";
    std::printf(
        "[distribution] %zu draws over %d bins: chi-square %.1f (%d degrees of freedom; "
        "fails above %.1f)\n",
        draws, result.bins, result.statistic, result.bins - 1, result.critical);
    EXPECT_LE(result.statistic, result.critical)
        << "the tokens drawn are not distributed as the target probabilities (chi-square "
        << result.statistic << " with " << result.bins - 1
        << " degrees of freedom; a correct sampler exceeds " << result.critical
        << " once in a million runs). The fixed draws above may still pass: a "
           "mistake that moves only some draws (a mass summed twice, a tile of the scan "
           "skipped) shows here";
}

TEST_F(Sample, DistributionPlain) {
    COURSE_SKIP_ON_EMULATOR("65536 draws");
    auto rng = test_rng();
    check_distribution(60, {1.0f, 0, 1.0f}, Logits::spread, 65536, rng);
}

TEST_F(Sample, DistributionTopKTopP) {
    COURSE_SKIP_ON_EMULATOR("65536 draws");
    auto rng = test_rng();
    check_distribution(1000, {0.8f, 40, 0.9f}, Logits::ties, 65536, rng);
}

// 2048 draws, which the emulator runs too: the same test, with less power.
TEST_F(Sample, DistributionSmall) {
    auto rng = test_rng();
    check_distribution(40, {1.0f, 20, 0.9f}, Logits::spread, 2048, rng);
}

// ---- Timed cases ----

// Logits made on the device from a hash; the tokens checked against the reference.
void time_against_copy(std::size_t rows, std::size_t vocab, ref::SamplingParams params,
                       course::Rng rng) {
    COURSE_SKIP_ON_EMULATOR("a timed case");
    const std::size_t n = rows * vocab;
    COURSE_REQUIRE_MEMORY(8 * n + (256u << 20));
    const std::string label = std::to_string(rows) + "x" + std::to_string(vocab);
    SCOPED_TRACE(label);
    const std::uint64_t seed = rng.next_u64();
    course::DeviceBuffer<float> logits("logits", n), copy("copy", n);
    course::fill_uniform(logits.data(), n, seed, -8.0f, 8.0f);
    const auto uniforms = course::random_floats(rows, 0.0f, 1.0f, rng);
    course::DeviceBuffer<float> d_uniforms("uniforms", uniforms);
    course::DeviceBuffer<int> tokens("tokens", rows);

    const auto timing = course::time_against(
        [&] {
            sample(logits.data(), d_uniforms.data(), tokens.data(), int(rows), int(vocab),
                   params.temperature, params.top_k, params.top_p);
        },
        [&] { course::baseline::device_copy(copy.data(), logits.data(), 4 * n); },
        {course::TimedOutput(tokens)},
        // The logits negated on the second input set: the kept tokens are other ones.
        {course::TimedInput(logits)});

    // Each token must be kept and own the uniform, give or take kMargin of probability (the
    // tokens of these rows are too many and too alike for draws away from every boundary).
    const auto got = tokens.download();
    std::size_t checked = 0;
    for (std::size_t r = 0; r < rows; ++r) {
        std::vector<float> row(vocab);
        for (std::size_t i = 0; i < vocab; ++i)
            row[i] = course::hashed::uniform(r * vocab + i, seed, -8.0f, 8.0f);
        if (ref::top_p_margin(row.data(), vocab, params) < kMargin) continue;
        ++checked;
        const auto p = ref::sampling_distribution(row.data(), vocab, params);
        ASSERT_TRUE(got[r] >= 0 && std::size_t(got[r]) < vocab && p[got[r]] > 0.0)
            << "row " << r << " drew token " << got[r] << ", not a kept token";
        double before = 0.0;
        for (int i = 0; i < got[r]; ++i) before += p[i];
        EXPECT_TRUE(before - kMargin <= uniforms[r] && uniforms[r] < before + p[got[r]] + kMargin)
            << "row " << r << ": token " << got[r] << " holds the cumulative probabilities ["
            << before << ", " << before + p[got[r]] << "), the uniform is " << uniforms[r];
    }
    EXPECT_GE(checked * 10, rows * 9) << "too few rows with top_p away from its boundaries";
    // The logits read once (the passes after the first hit the L2), the uniforms, the tokens.
    course::record_bandwidth(label, timing, 4.0 * n + 8.0 * rows, "copy", 2.0 * 4 * n);
}

// Llama 3's vocabulary at 64 rows (33 MB of logits), with a top-k of 50 and a nucleus of 0.9.
TEST_F(Sample, Bandwidth64x128256) { time_against_copy(64, 128256, {0.8f, 50, 0.9f}, test_rng()); }
// GPT-2's at 16 rows, top-k 2048 alone.
TEST_F(Sample, Bandwidth16x50304) { time_against_copy(16, 50304, {1.0f, 2048, 1.0f}, test_rng()); }

}  // namespace
