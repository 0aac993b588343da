// Checker of 10_inference/decode_attention: one query per (sequence, head) against bf16 caches
// whose positions past each sequence's length hold NaN (a read past the length shows), against
// the double CPU reference: lengths around the split sizes a kernel may choose (1, 31, 255, 256,
// 257, 1000, 4097) side by side in one batch, D 64 and 128, grouped-query and multi-query
// heads, scores in the hundreds (exp overflows without the maximum), one sequence of 32768 keys;
// each case run twice with the workspace poisoned (the same bits both times: a race, or a read of
// a workspace slot nothing wrote, shows; the second call must write all of out too: a count of
// finished splits left over from the first call shows). Then the bandwidth on the cache's bytes,
// against a device copy of them, at batch 16 x 4096 keys and batch 1 x 32768 keys (D 128, judged)
// and batch 16 x 4096 keys at D 64.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/bf16.h"
#include "course/reference/inference.h"
#include "course/testing.h"
#include "decode_attention.h"

namespace {

namespace ref = course::reference;

constexpr double kUnitRoundoff = 0x1.0p-24;  // float32

struct Case {
    ref::DecodeShape shape;
    std::vector<int> lengths;  // one per sequence
    float boost = 1.0f;        // q in [-boost, boost]: 100 makes scores of hundreds
    float scale() const { return 1.0f / std::sqrt(static_cast<float>(shape.D)); }
    std::string describe() const {
        std::string text = "batch " + std::to_string(shape.batch) + ", heads " +
                           std::to_string(shape.heads) + " over " + std::to_string(shape.kv_heads) +
                           " key-value heads, D " + std::to_string(shape.D) + ", capacity " +
                           std::to_string(shape.capacity) + ", lengths";
        for (int length : lengths) text += " " + std::to_string(length);
        return text + (boost != 1.0f ? ", scores in the hundreds" : "");
    }
};

struct Inputs {
    std::vector<float> q, K, V;  // bf16 values; the cache past each length is NaN
};

std::vector<float> bf16_random(std::size_t n, float magnitude, course::Rng& rng) {
    auto values = course::random_floats(n, -magnitude, magnitude, rng);
    for (float& v : values) v = course::round_to_bf16(v);
    return values;
}

Inputs make_inputs(const Case& c, course::Rng& rng) {
    const auto& s = c.shape;
    Inputs in{bf16_random(s.queries() * s.D, c.boost, rng),
              bf16_random(s.cache_elements(), 1.0f, rng),
              bf16_random(s.cache_elements(), 1.0f, rng)};
    for (std::size_t b = 0; b < s.batch; ++b)
        for (std::size_t g = 0; g < s.kv_heads; ++g) {
            const std::size_t head = (b * s.kv_heads + g) * s.capacity * s.D;
            for (std::size_t i = c.lengths[b] * s.D; i < s.capacity * s.D; ++i)
                in.K[head + i] = in.V[head + i] = std::nanf("");
        }
    return in;
}

// out: a softmax-weighted mean of values in [-1, 1], rounded to bf16 once (2^-9 relatively);
// its float32 sums are far smaller. 2^-8 absolute and relative leaves a factor 2.
course::Tolerance out_tolerance() { return {course::kBf16Roundoff, course::kBf16Roundoff}; }

// lse = m + log l: l is a float32 sum of up to `length` terms (16 u sqrt(length) covers any
// order, as Tolerance::float32), and each score's rounding, relative u |s|, moves it by 8 u
// times the largest score at most; 8 u relative for |m|. A key dropped from a row of n keys moves
// lse by about 1/n of the row's weight, far outside.
course::Tolerance lse_tolerance(const Case& c, const Inputs& in) {
    double largest = 0.0;  // |s| <= scale * sum |q_d| since |k| <= 1
    for (std::size_t r = 0; r < c.shape.queries(); ++r) {
        double sum = 0.0;
        for (std::size_t d = 0; d < c.shape.D; ++d) sum += std::fabs(in.q[r * c.shape.D + d]);
        largest = std::max(largest, c.scale() * sum);
    }
    const int longest = *std::max_element(c.lengths.begin(), c.lengths.end());
    return {kUnitRoundoff * (16.0 * std::sqrt(static_cast<double>(longest)) + 8.0 * largest),
            8.0 * kUnitRoundoff};
}

struct Got {
    std::vector<std::uint16_t> out_bits;
    std::vector<float> out, lse;
};

void run(const Case& c, const course::DeviceBuffer<std::uint16_t>& q,
         const course::DeviceBuffer<std::uint16_t>& K, const course::DeviceBuffer<std::uint16_t>& V,
         const course::DeviceBuffer<int>& lengths, course::DeviceBuffer<std::uint16_t>& out,
         course::DeviceBuffer<float>& lse, course::DeviceBuffer<float>& workspace) {
    const auto& s = c.shape;
    decode_attention(course::as_bf16(q), course::as_bf16(K), course::as_bf16(V), lengths.data(),
                     course::as_bf16(out), lse.data(), workspace.data(), static_cast<int>(s.batch),
                     static_cast<int>(s.heads), static_cast<int>(s.kv_heads),
                     static_cast<int>(s.capacity), static_cast<int>(s.D), c.scale());
}

// What a wrong result says about the kernel, the planted bugs' symptoms first.
std::string diagnose(const Case& c, const Inputs& in, const Got& got, const ref::DecodeOutput& want,
                     const course::Tolerance& out_tol, const course::Tolerance& lse_tol) {
    const auto& s = c.shape;
    const std::size_t D = s.D;
    if (std::all_of(got.out.begin(), got.out.end(), [](float v) { return course::is_poison(v); }))
        return "out was never written. If the last block of each (sequence, head) merges: does "
               "its count of finished splits start at 0? (The workspace holds anything on entry.)";
    auto row_ok = [&](const std::vector<float>& out, const std::vector<float>& lse,
                      const ref::DecodeOutput& w, std::size_t r) {
        if (!lse_tol.accepts(lse[r], w.L[r])) return false;
        for (std::size_t d = 0; d < D; ++d)
            if (!out_tol.accepts(out[r * D + d], w.O[r * D + d])) return false;
        return true;
    };
    bool nan = false, lse_low = true, lse_right = true;
    int longest_right = 0, shortest_wrong = 1 << 30;
    std::size_t wrong = 0;
    for (std::size_t r = 0; r < s.queries(); ++r) {
        const int length = c.lengths[r / s.heads];
        if (row_ok(got.out, got.lse, want, r)) {
            longest_right = std::max(longest_right, length);
            continue;
        }
        ++wrong;
        shortest_wrong = std::min(shortest_wrong, length);
        if (!(got.lse[r] < want.L[r])) lse_low = false;
        if (!lse_tol.accepts(got.lse[r], want.L[r])) lse_right = false;
        for (std::size_t d = 0; d < D; ++d)
            nan = nan || (std::isnan(got.out[r * D + d]) && !course::is_poison(got.out[r * D + d]));
        nan = nan || std::isnan(got.lse[r]);
    }
    if (wrong == 0) return "";
    const bool padded = std::any_of(c.lengths.begin(), c.lengths.end(),
                                    [&](int length) { return length < int(s.capacity); });
    if (nan && padded)
        return "out or lse holds NaN: in this checker every cache position at or past a "
               "sequence's length holds NaN, so a key or value was read at or past lengths[b] "
               "(the last split of a sequence ends at min(lengths[b], its chunk's end))";
    if (nan)
        return "out or lse holds NaN: exp overflowed, or a sum is 0. Is the maximum subtracted "
               "before exp, and does an empty split leave m = -FLT_MAX, l = 0, o = 0 (not NaN)?";
    if (s.kv_heads != s.heads) {
        // The other way to map a query head to a key-value head: h % kv_heads.
        ref::DecodeShape mha = s;
        mha.kv_heads = s.heads;
        std::vector<float> K2, V2;
        for (std::size_t b = 0; b < s.batch; ++b)
            for (std::size_t h = 0; h < s.heads; ++h) {
                const std::size_t from = (b * s.kv_heads + h % s.kv_heads) * s.capacity * D;
                K2.insert(K2.end(), in.K.begin() + from, in.K.begin() + from + s.capacity * D);
                V2.insert(V2.end(), in.V.begin() + from, in.V.begin() + from + s.capacity * D);
            }
        const auto modulo = ref::decode_attention(in.q, K2, V2, c.lengths, mha, c.scale());
        bool all = true;
        for (std::size_t r = 0; r < s.queries() && all; ++r)
            all = row_ok(got.out, got.lse, modulo, r);
        if (all)
            return "query head h read key-value head h % kv_heads: the heads that share a "
                   "key-value head are neighbours, g = h / (heads / kv_heads)";
    }
    if (lse_right)
        return "lse is right in every row but out is not: the running output o must be "
               "rescaled by exp(m_old - m_new) whenever the maximum rises, as the sum l is";
    if (lse_low)
        return "lse is below the reference in every wrong row: keys are missing from the sums "
               "(the last keys of a split, or of the cache?)";
    if (longest_right > 0 && shortest_wrong > longest_right)
        return "every row whose cache holds more than " + std::to_string(longest_right) +
               " keys is wrong, every shorter one right: the rows of several splits. Is each "
               "split's state rescaled to the common maximum before the merge adds it "
               "(l_s and o_s times exp(m_s - M), M the largest m_s)?";
    return "";
}

// One case: the exercise runs twice on the same inputs, its outputs and workspace poisoned
// before each run; both runs must give the same bits, and out and lse must match the reference.
void check_case(const Case& c, course::Rng& rng) {
    SCOPED_TRACE(c.describe());
    const auto& s = c.shape;
    const Inputs in = make_inputs(c, rng);
    const auto want = ref::decode_attention(in.q, in.K, in.V, c.lengths, s, c.scale());
    course::DeviceBuffer<std::uint16_t> q("q", course::bf16_bits(in.q)),
        K("k_cache", course::bf16_bits(in.K)), V("v_cache", course::bf16_bits(in.V)),
        out("out", s.queries() * s.D);
    course::DeviceBuffer<int> lengths("lengths", c.lengths);
    course::DeviceBuffer<float> lse("lse", s.queries()),
        workspace("workspace",
                  decode_attention_workspace_floats(
                      static_cast<int>(s.batch), static_cast<int>(s.heads), static_cast<int>(s.D)));

    run(c, q, K, V, lengths, out, lse, workspace);
    Got got{out.download(), {}, lse.download()};
    got.out = course::bf16_values(got.out_bits);
    const auto out_tol = out_tolerance();
    const auto lse_tol = lse_tolerance(c, in);
    const std::string cause = diagnose(c, in, got, want, out_tol, lse_tol);
    course::CompareOptions out_options{"out ([batch][heads][D])", course::Matrix{s.queries(), s.D}};
    out_options.diagnose = [&] { return cause.empty() ? "" : "likely cause: " + cause; };
    course::CompareOptions lse_options{"lse ([batch][heads])"};
    lse_options.diagnose = out_options.diagnose;
    EXPECT_TRUE(course::expect_close(got.out, want.O, out_tol, out_options));
    EXPECT_TRUE(course::expect_close(got.lse, want.L, lse_tol, lse_options));

    out.poison();
    lse.poison();
    workspace.poison();
    run(c, q, K, V, lengths, out, lse, workspace);
    const auto again = out.download();
    // A result kept from the first call: the second wrote nothing, or less, on the same inputs.
    std::size_t unwritten = 0;
    for (std::uint16_t bits : again) unwritten += course::is_poison(bits);
    std::size_t written_first = 0;
    for (std::uint16_t bits : got.out_bits) written_first += !course::is_poison(bits);
    ASSERT_FALSE(unwritten > 0 && written_first == got.out_bits.size())
        << "the first call wrote all of `out` and a second call on the same inputs left "
        << unwritten << " of its " << again.size()
        << " elements unwritten: something kept from the first call decided that no block "
           "merges. Is the count of finished splits of each (sequence, head) set back to 0 by "
           "the block that merges, ready for the next call?";
    std::size_t differing = 0;
    for (std::size_t i = 0; i < again.size(); ++i) differing += again[i] != got.out_bits[i];
    EXPECT_EQ(differing, 0u)
        << "`out` differs between two runs on the same inputs at " << differing
        << " elements: a race (a barrier missing before the groups' states are merged?), or a "
           "read of a workspace slot that this run did not write (the workspace is poisoned "
           "before each run)";
}

class DecodeAttention : public course::GpuTest {};

// Lengths side by side in one batch: 1 key, less than a warp's keys, around 256 (a split), a
// prime, several splits with a partial last one. The capacity leaves NaN past every length.
TEST_F(DecodeAttention, Lengths) {
    auto rng = test_rng();
    for (std::size_t D : {64, 128})
        check_case({{8, 2, 2, 4100, D}, {1, 31, 255, 256, 257, 1000, 4097, 2}}, rng);
}

// A full cache (capacity == length: nothing past it to read) and one key of capacity 1.
TEST_F(DecodeAttention, FullCaches) {
    auto rng = test_rng();
    for (std::size_t D : {64, 128}) {
        check_case({{2, 3, 3, 777, D}, {777, 777}}, rng);
        check_case({{1, 1, 1, 1, D}, {1}}, rng);
    }
}

// Grouped-query heads (8 query heads over 2 key-value heads) and multi-query (4 over 1).
TEST_F(DecodeAttention, GroupedQueryHeads) {
    auto rng = test_rng();
    for (std::size_t D : {64, 128}) {
        check_case({{3, 8, 2, 700, D}, {700, 65, 390}}, rng);
        check_case({{2, 4, 1, 300, D}, {300, 129}}, rng);
    }
}

// Scores in the hundreds: exp overflows float unless each state keeps its maximum out.
TEST_F(DecodeAttention, LargeScores) {
    auto rng = test_rng();
    for (std::size_t D : {64, 128}) check_case({{2, 2, 2, 1500, D}, {1500, 600}, 100.0f}, rng);
}

// One long sequence, as at the end of a long generation: every split the kernel allows.
TEST_F(DecodeAttention, LongSequence) {
    COURSE_SKIP_ON_EMULATOR("32768 keys");
    auto rng = test_rng();
    check_case({{1, 2, 2, 32768, 128}, {32768}}, rng);
    check_case({{1, 2, 1, 32768, 64}, {20011}}, rng);
}

// ---- Timed cases ----

// The caches of a timed case are hundreds of MB: made on the device from a hash (element i of
// the K-then-V buffer), recomputed on the host for the rows the checker compares.
__global__ void fill_bf16_kernel(__nv_bfloat16* out, std::size_t n, std::uint64_t seed, float lo,
                                 float hi) {
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride)
        out[i] = __float2bfloat16(course::hashed::uniform(i, seed, lo, hi));
}

void fill_bf16(course::DeviceBuffer<std::uint16_t>& buffer, std::uint64_t seed) {
    fill_bf16_kernel<<<1024, 256>>>(course::as_bf16(buffer), buffer.size(), seed, -1.0f, 1.0f);
    CUDA_CHECK_LAUNCH();
}

float hashed_bf16(std::size_t i, std::uint64_t seed) {
    return course::round_to_bf16(course::hashed::uniform(i, seed, -1.0f, 1.0f));
}

// Every sequence at its full length (capacity), multi-head. The judged figure is the bandwidth
// on the bytes that must move: K and V once (batch x heads x length x D x 2 bytes each), q,
// out and lse; the baseline copies K and V (one read and one write of those bytes).
void time_against_copy(std::size_t batch, std::size_t heads, std::size_t length, std::size_t D,
                       course::Rng rng) {
    COURSE_SKIP_ON_EMULATOR("a timed case");
    const Case c{{batch, heads, heads, length, D}, std::vector<int>(batch, int(length))};
    const auto& s = c.shape;
    const std::size_t cache = s.cache_elements();
    COURSE_REQUIRE_MEMORY(2 * 4 * cache + (256u << 20));  // K and V, their copy, the L2 flush
    const std::string label = "B" + std::to_string(batch) + " H" + std::to_string(heads) + " L" +
                              std::to_string(length) + " D" + std::to_string(D);
    SCOPED_TRACE(label);
    // K and V in one buffer, so that one copy moves both.
    course::DeviceBuffer<std::uint16_t> kv("k_cache and v_cache", 2 * cache),
        copy("copy", 2 * cache);
    const std::uint64_t seed = rng.next_u64();
    fill_bf16(kv, seed);
    const auto q_values = bf16_random(s.queries() * D, 1.0f, rng);
    course::DeviceBuffer<std::uint16_t> q("q", course::bf16_bits(q_values)),
        out("out", s.queries() * D);
    course::DeviceBuffer<int> lengths("lengths", c.lengths);
    course::DeviceBuffer<float> lse("lse", s.queries()),
        workspace("workspace", decode_attention_workspace_floats(int(batch), int(heads), int(D)));
    const auto* K = course::as_bf16(kv);
    const auto* V = K + cache;
    // lse's tolerance for inputs in [-1, 1]: |s| <= scale * D.
    const course::Tolerance lse_tol{
        kUnitRoundoff * (16.0 * std::sqrt(double(length)) + 8.0 * c.scale() * D),
        8.0 * kUnitRoundoff};

    const auto timing = course::time_against(
        [&] {
            decode_attention(course::as_bf16(q), K, V, lengths.data(), course::as_bf16(out),
                             lse.data(), workspace.data(), int(batch), int(heads), int(heads),
                             int(length), int(D), c.scale());
        },
        [&] { course::baseline::device_copy(copy.data(), kv.data(), kv.bytes()); },
        {course::TimedOutput(out), course::TimedOutput(lse, lse_tol)},
        // q negated on the second input set (bf16's sign bit): every score changes sign.
        {course::TimedInput(q, std::uint16_t{0x8000})});

    // Rows at the start, the end and in between, against the reference from the hash.
    const auto got_out = course::bf16_values(out.download());
    const auto got_lse = lse.download();
    std::vector<std::size_t> rows{0, s.queries() - 1};
    for (int i = 0; i < 6; ++i)
        rows.push_back(std::size_t(rng.uniform_int(0, std::int64_t(s.queries()) - 1)));
    std::vector<float> got_o, got_l;
    std::vector<double> want_o, want_l;
    for (std::size_t r : rows) {
        const std::size_t base = r * length * D;  // multi-head: row r's cache is head r
        const auto one = ref::decode_attention_row(
            q_values.data() + r * D, length, D, c.scale(),
            [&](std::size_t j, std::size_t d) { return hashed_bf16(base + j * D + d, seed); },
            [&](std::size_t j, std::size_t d) {
                return hashed_bf16(cache + base + j * D + d, seed);
            });
        got_o.insert(got_o.end(), got_out.begin() + r * D, got_out.begin() + (r + 1) * D);
        want_o.insert(want_o.end(), one.O.begin(), one.O.end());
        got_l.push_back(got_lse[r]);
        want_l.push_back(one.L[0]);
    }
    EXPECT_TRUE(course::expect_close(got_o, want_o, out_tolerance(),
                                     {"out on sampled rows (index = sample * D + d)"}));
    EXPECT_TRUE(course::expect_close(got_l, want_l, lse_tol, {"lse on sampled rows"}));

    const double kv_bytes = 2.0 * cache * 2;  // K and V, 2 bytes an element
    const double bytes = kv_bytes + 2.0 * 2 * s.queries() * D + 4.0 * s.queries();
    course::record_bandwidth(label, timing, bytes, "copy", 2.0 * kv_bytes);
}

// Batch 16 x 4096 keys (512 MiB of cache): 256 (sequence, head) pairs, enough blocks even
// without a split.
TEST_F(DecodeAttention, BandwidthBatch16) { time_against_copy(16, 16, 4096, 128, test_rng()); }
// Batch 1 x 32768 keys (256 MiB): 16 pairs for 132 SMs: only a split of the cache fills them.
TEST_F(DecodeAttention, BandwidthBatch1Long) { time_against_copy(1, 16, 32768, 128, test_rng()); }
// D 64: half the bytes per key, twice the keys per load step (shown, not judged).
TEST_F(DecodeAttention, BandwidthBatch16D64) { time_against_copy(16, 16, 4096, 64, test_rng()); }

}  // namespace
