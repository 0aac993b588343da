// Checker of 08_training/embedding: the forward on row lengths around the 16-byte width, views
// that start off a 16-byte boundary (one pointer at a time), the first and last token ids; the
// backward accumulating into gradients that hold values already, with tokens that occur once,
// tokens that repeat thousands of times (one of them in 60% of the positions) and a batch of a
// single token, the rows of absent tokens and of positions past T left alone, and the same bits
// on every run (several runs of the most repeated case); float and bf16 activations (compute
// capability 8.0 and newer). Then the forward's bandwidth at GPT-2's sizes against a device copy.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "course/baselines.h"
#include "course/testing.h"
#include "embedding.h"
#include "training_checks.h"

namespace {

using training_checks::Activations;
using training_checks::random_activations;
using training_checks::View;
using bf16 = __nv_bfloat16;

class Embedding : public course::GpuTest {};

struct Shape {
    int B, T, C, V;
    std::string describe() const {
        return "B = " + std::to_string(B) + ", T = " + std::to_string(T) +
               ", C = " + std::to_string(C) + ", V = " + std::to_string(V);
    }
};

// How the token ids are drawn.
enum class Tokens {
    kUniform,   // uniformly from [0, V), with the first and last ids placed too
    kOneHeavy,  // 60% of the positions the same token, the rest uniform
    kAllSame,   // every position the same token
};

std::string describe(Tokens kind) {
    switch (kind) {
        case Tokens::kUniform:
            return "token ids uniform (0 and V - 1 among them)";
        case Tokens::kOneHeavy:
            return "one token at 60% of the positions";
        case Tokens::kAllSame:
            return "every position the same token";
    }
    return "";
}

std::vector<int> make_tokens(const Shape& s, Tokens kind, course::Rng& rng) {
    const int n = s.B * s.T;
    std::vector<int> tokens(n);
    const int heavy = static_cast<int>(rng.uniform_int(0, s.V - 1));
    for (int& token : tokens) {
        const bool is_heavy =
            kind == Tokens::kAllSame || (kind == Tokens::kOneHeavy && rng.uniform01() < 0.6);
        token = is_heavy ? heavy : static_cast<int>(rng.uniform_int(0, s.V - 1));
    }
    if (kind == Tokens::kUniform) {
        tokens[0] = 0;
        tokens[n - 1] = s.V - 1;
    }
    return tokens;
}

// ---- The forward ----

struct ForwardCase {
    Shape shape;
    std::size_t out_offset = 0, wte_offset = 0, wpe_offset = 0;
    std::string describe(const char* type) const {
        std::string text = std::string(type) + ", " + shape.describe();
        if (out_offset + wte_offset + wpe_offset > 0)
            text += ", views starting (out, wte, wpe) " + std::to_string(out_offset) + ", " +
                    std::to_string(wte_offset) + ", " + std::to_string(wpe_offset) +
                    " elements past a 16-byte boundary";
        return text;
    }
};

// The float sum of two floats is one IEEE rounding, the same on both sides: exact. In bf16, a sum
// rounded from float to bf16 (the contract) and one rounded once in bf16 arithmetic may differ by
// a bf16 unit in the last place where the float sum was rounded too.
template <class Act>
course::Tolerance forward_tolerance() {
    return {0.0, training_checks::kIsBf16<Act> ? course::kBf16Roundoff : 0.0};
}

template <class Act>
void check_forward(const ForwardCase& c, course::Rng& rng) {
    SCOPED_TRACE("embedding_forward, " + c.describe(Activations<Act>::kName));
    const Shape& s = c.shape;
    const std::size_t rows = std::size_t(s.B) * s.T, C = s.C;
    const auto tokens = make_tokens(s, Tokens::kUniform, rng);
    const auto wte = random_activations<Act>(std::size_t(s.V) * C, -1.0f, 1.0f, rng);
    // Exactly T rows of wpe: a row past T read by mistake lies in the redzone (NaN).
    const auto wpe = random_activations<Act>(std::size_t(s.T) * C, -1.0f, 1.0f, rng);
    course::DeviceBuffer<int> d_tokens("tokens", tokens);
    View<Act> d_wte("wte", wte, c.wte_offset), d_wpe("wpe", wpe, c.wpe_offset);
    View<Act> out("out", rows * C, c.out_offset);

    embedding_forward(out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), s.B, s.T, s.C);

    // The sum in float, rounded once to Act.
    std::vector<float> want(rows * C);
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t k = 0; k < C; ++k)
            want[r * C + k] = Activations<Act>::representable(wte[std::size_t(tokens[r]) * C + k] +
                                                              wpe[(r % s.T) * C + k]);
    EXPECT_TRUE(out.front_untouched());
    EXPECT_TRUE(course::expect_close(out.values(), want, forward_tolerance<Act>(),
                                     {"out", course::Matrix{rows, C}}));
}

// Row lengths around the width of 16 bytes (4 floats, 8 bf16) and a warp; GPT-2's C = 768; one
// pointer at a time off a 16-byte boundary.
std::vector<ForwardCase> forward_cases() {
    return {{{1, 1, 1, 7}},
            {{1, 1, 4, 7}},
            {{1, 1, 8, 7}},
            {{2, 3, 5, 11}},
            {{3, 17, 33, 101}},
            {{2, 5, 37, 1000}},
            {{4, 64, 768, 1000}},
            {{1, 1024, 768, 1000}},
            {{2, 9, 768, 1000}, 1, 0, 0},
            {{2, 9, 768, 1000}, 0, 1, 0},
            {{2, 9, 768, 1000}, 0, 0, 1}};
}

TEST_F(Embedding, ForwardFloat) {
    auto rng = test_rng();
    for (const ForwardCase& c : forward_cases()) check_forward<float>(c, rng);
}

TEST_F(Embedding, ForwardBf16) {
    COURSE_REQUIRE_BF16();
    auto rng = test_rng();
    for (const ForwardCase& c : forward_cases()) check_forward<bf16>(c, rng);
}

// ---- The backward ----

// TokenBuckets as the trainer builds them (gpt.cu): the (token, position) pairs sorted, so that
// each token's positions are together and in increasing order.
struct HostBuckets {
    std::vector<int> token, start, positions;
};

HostBuckets make_buckets(const std::vector<int>& tokens) {
    const int n = static_cast<int>(tokens.size());
    std::vector<std::pair<int, int>> order(n);
    for (int i = 0; i < n; ++i) order[i] = {tokens[i], i};
    std::sort(order.begin(), order.end());
    HostBuckets b;
    for (int i = 0; i < n; ++i) {
        if (i == 0 || order[i].first != order[i - 1].first) {
            b.token.push_back(order[i].first);
            b.start.push_back(i);
        }
        b.positions.push_back(order[i].second);
    }
    b.start.push_back(n);
    return b;
}

struct DeviceBuckets {
    course::DeviceBuffer<int> token, start, positions;
    explicit DeviceBuckets(const HostBuckets& b)
        : token("buckets.token", b.token),
          start("buckets.start", b.start),
          positions("buckets.positions", b.positions) {}
    TokenBuckets view() const {
        return {static_cast<int>(token.size()), token.data(), start.data(), positions.data()};
    }
};

// The inputs of a backward call, and the gradients it must leave.
struct Backward {
    Shape shape;
    int wpe_rows;  // rows of dwpe: T and a few more, which the call must leave as they are
    std::vector<int> tokens;
    std::vector<float> dout, dwte0, dwpe0;  // dout as Act holds it; the gradients before the call
    std::vector<double> dwte, dwpe;         // after it
    int most_repeated = 0;                  // positions of the most frequent token
};

template <class Act>
Backward make_backward(const Shape& s, Tokens kind, course::Rng& rng) {
    Backward b{s, s.T + 3};
    b.tokens = make_tokens(s, kind, rng);
    const std::size_t C = s.C;
    b.dout = random_activations<Act>(std::size_t(s.B) * s.T * C, -1.0f, 1.0f, rng);
    b.dwte0 = course::random_floats(std::size_t(s.V) * C, -1.0f, 1.0f, rng);
    b.dwpe0 = course::random_floats(std::size_t(b.wpe_rows) * C, -1.0f, 1.0f, rng);
    b.dwte.assign(b.dwte0.begin(), b.dwte0.end());
    b.dwpe.assign(b.dwpe0.begin(), b.dwpe0.end());
    std::vector<int> count(s.V, 0);
    for (std::size_t p = 0; p < b.tokens.size(); ++p) {
        const std::size_t token = b.tokens[p], t = p % s.T;
        ++count[token];
        for (std::size_t k = 0; k < C; ++k) {
            b.dwte[token * C + k] += b.dout[p * C + k];
            b.dwpe[t * C + k] += b.dout[p * C + k];
        }
    }
    b.most_repeated = *std::max_element(count.begin(), count.end());
    return b;
}

// Sums of up to `terms` values in [-1, 1] added to a value in [-1, 1], in float.
course::Tolerance sum_tolerance(int terms) { return course::Tolerance::float32(terms + 1, 1.0); }

// The gradients after one call, downloaded.
struct Got {
    std::vector<float> dwte, dwpe;
};

template <class Act>
Got run_backward(const Backward& b) {
    const Shape& s = b.shape;
    course::DeviceBuffer<typename Activations<Act>::Bits> dout("dout",
                                                               Activations<Act>::store(b.dout));
    course::DeviceBuffer<float> dwte("dwte", b.dwte0), dwpe("dwpe", b.dwpe0);
    const DeviceBuckets buckets(make_buckets(b.tokens));
    embedding_backward(dwte.data(), dwpe.data(), Activations<Act>::pointer(dout), buckets.view(),
                       s.B, s.T, s.C);
    return {dwte.download(), dwpe.download()};
}

// What a wrong dwte says, before the numbers.
std::string dwte_diagnosis(const Backward& b, const std::vector<float>& got) {
    const std::size_t C = b.shape.C;
    const course::Tolerance tol = sum_tolerance(b.most_repeated);
    std::vector<int> count(b.shape.V, 0);
    for (int token : b.tokens) ++count[token];
    bool absent_changed = false, repeated_wrong = false, single_wrong = false, overwritten = true;
    for (std::size_t v = 0; v < std::size_t(b.shape.V); ++v)
        for (std::size_t k = 0; k < C; ++k) {
            const std::size_t i = v * C + k;
            const bool right = tol.accepts(got[i], b.dwte[i]);
            if (count[v] == 0 && !right) absent_changed = true;
            if (count[v] > 1 && !right) repeated_wrong = true;
            if (count[v] == 1 && !right) single_wrong = true;
            if (count[v] > 0 && !tol.accepts(got[i], b.dwte[i] - b.dwte0[i])) overwritten = false;
        }
    if (overwritten)
        return "dwte holds the sums of dout alone: it was overwritten, not added into (the "
               "contract: +=, the trainer adds micro-batches up)";
    if (absent_changed)
        return "rows of dwte whose token does not occur in the batch changed: is a bucket's row "
               "found from its index k instead of its token id, buckets.token[k]?";
    if (repeated_wrong && !single_wrong)
        return "the rows of tokens that repeat are wrong, those of tokens that occur once right: "
               "positions of the same token add into one row at the same time, a race. Give each "
               "row one owner (a block per bucket) that sums its positions in order";
    return "";
}

std::string dwpe_diagnosis(const Backward& b, const std::vector<float>& got) {
    const std::size_t C = b.shape.C, past = std::size_t(b.shape.T) * C;
    for (std::size_t i = past; i < got.size(); ++i)
        if (got[i] != b.dwpe0[i])
            return "rows of dwpe past T changed: they are not positions of this batch";
    const course::Tolerance tol = sum_tolerance(b.shape.B);
    for (std::size_t i = 0; i < past; ++i)
        if (!tol.accepts(got[i], b.dwpe[i] - b.dwpe0[i])) return "";
    return "dwpe holds the sums of dout alone: it was overwritten, not added into (the contract: "
           "+=)";
}

template <class Act>
void check_backward(const Shape& s, Tokens kind, course::Rng& rng) {
    SCOPED_TRACE("embedding_backward, " + std::string(Activations<Act>::kName) + " dout, " +
                 s.describe() + ", " + describe(kind));
    const Backward b = make_backward<Act>(s, kind, rng);
    const Got got = run_backward<Act>(b);
    const std::size_t C = s.C;
    course::CompareOptions dwte_options{"dwte", course::Matrix{std::size_t(s.V), C}};
    dwte_options.diagnose = [&] { return dwte_diagnosis(b, got.dwte); };
    EXPECT_TRUE(
        course::expect_close(got.dwte, b.dwte, sum_tolerance(b.most_repeated), dwte_options));
    course::CompareOptions dwpe_options{"dwpe", course::Matrix{std::size_t(b.wpe_rows), C}};
    dwpe_options.diagnose = [&] { return dwpe_diagnosis(b, got.dwpe); };
    EXPECT_TRUE(course::expect_close(got.dwpe, b.dwpe, sum_tolerance(s.B), dwpe_options));
}

template <class Act>
void check_backward_cases(course::Rng& rng) {
    // Few repeats, then a token in thousands of positions, then a single token everywhere.
    for (const Shape& s : {Shape{1, 1, 1, 7}, Shape{2, 3, 5, 11}, Shape{3, 17, 33, 101},
                           Shape{2, 5, 37, 1000}, Shape{4, 64, 768, 1000}})
        check_backward<Act>(s, Tokens::kUniform, rng);
    check_backward<Act>({8, 1024, 768, 1000}, Tokens::kOneHeavy, rng);
    check_backward<Act>({2, 100, 37, 50}, Tokens::kAllSame, rng);
}

TEST_F(Embedding, BackwardFloat) {
    auto rng = test_rng();
    check_backward_cases<float>(rng);
}

TEST_F(Embedding, BackwardBf16) {
    COURSE_REQUIRE_BF16();
    auto rng = test_rng();
    check_backward_cases<bf16>(rng);
}

// The most repeated case several times from the same gradients: every run must give the same
// bits. Float atomicAdd into the row of a token at 5000 positions adds them in the order the
// hardware serves the atomics, which changes from run to run, and so do the rounded sums.
TEST_F(Embedding, BackwardSameBitsEveryRun) {
    auto rng = test_rng();
    const Backward b = make_backward<float>({8, 1024, 768, 1000}, Tokens::kOneHeavy, rng);
    SCOPED_TRACE("embedding_backward, float dout, " + b.shape.describe() + ", " +
                 describe(Tokens::kOneHeavy) + ": 5 runs from the same dwte and dwpe");
    const Got first = run_backward<float>(b);
    const std::string why =
        "Are rows summed with float atomicAdd (whose order changes between runs)? Sum each "
        "bucket's positions in their listed order in one thread per channel";
    for (int run = 1; run < 5; ++run) {
        const Got again = run_backward<float>(b);
        const std::string dwte =
            training_checks::bits_diagnosis("dwte", first.dwte, again.dwte, why);
        const std::string dwpe =
            training_checks::bits_diagnosis("dwpe", first.dwpe, again.dwpe, why);
        if (!dwte.empty() || !dwpe.empty()) {
            ADD_FAILURE() << (dwte.empty() ? dwpe : dwte);
            return;
        }
    }
}

// ---- Bandwidth of the forward: GPT-2's C and vocabulary, 65536 positions ----

// Bytes that must move: out written (B T C elements), the rows of wte of the distinct tokens and
// all of wpe read once, the token ids. A row of wte used again may come from L2, so repeated
// tokens are counted once; the copy reads and writes out's size.
template <class Act>
void time_forward(const std::string& label) {
    using Bits = typename Activations<Act>::Bits;
    const Shape s{64, 1024, 768, 50257};
    const std::size_t rows = std::size_t(s.B) * s.T, C = s.C, n = rows * C;
    // out, the copy's destination, the harness's two copies of out (one per input set), wte,
    // wpe, tokens, and the flush.
    COURSE_REQUIRE_MEMORY((4 * n + std::size_t(s.V + s.T) * C) * sizeof(Act) + 4 * rows +
                          (256u << 20));
    auto rng = course::rng_for(label);
    const auto tokens = make_tokens(s, Tokens::kUniform, rng);
    const auto wte = random_activations<Act>(std::size_t(s.V) * C, -1.0f, 1.0f, rng);
    const auto wpe = random_activations<Act>(std::size_t(s.T) * C, -1.0f, 1.0f, rng);
    course::DeviceBuffer<int> d_tokens("tokens", tokens);
    View<Act> d_wte("wte", wte, 0), d_wpe("wpe", wpe, 0), out("out", n, 0);
    course::DeviceBuffer<Bits> copy("copy", n);

    // The second input set: wte with every sign flipped, which changes every element of out.
    const auto timing = course::time_against(
        [&] {
            embedding_forward(out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), s.B, s.T,
                              s.C);
        },
        [&] { course::baseline::device_copy(copy.data(), out.buffer().data(), n * sizeof(Act)); },
        {course::TimedOutput(out.buffer())}, {course::sign_flipped(d_wte.buffer())});

    std::vector<float> want(n);
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t k = 0; k < C; ++k)
            want[r * C + k] = Activations<Act>::representable(wte[std::size_t(tokens[r]) * C + k] +
                                                              wpe[(r % s.T) * C + k]);
    {
        SCOPED_TRACE("the timed run, " + label);
        EXPECT_TRUE(course::expect_close(out.values(), want, forward_tolerance<Act>(),
                                         {"out", course::Matrix{rows, C}}));
    }
    std::vector<int> sorted = tokens;
    std::sort(sorted.begin(), sorted.end());
    const double distinct = double(std::unique(sorted.begin(), sorted.end()) - sorted.begin());
    const double bytes = (double(n) + (distinct + s.T) * C) * sizeof(Act) + 4.0 * rows;
    course::record_bandwidth(label, timing, bytes, "copy", 2.0 * n * sizeof(Act));
}

TEST_F(Embedding, BandwidthForwardFloat) { time_forward<float>("forward float B=64 T=1024 C=768"); }
TEST_F(Embedding, BandwidthForwardBf16) {
    COURSE_REQUIRE_BF16();
    time_forward<bf16>("forward bf16 B=64 T=1024 C=768");
}

}  // namespace
