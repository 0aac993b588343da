// What the checkers of module 07 share: inputs (float32, or the tensor-core exercises' 16-bit
// values, bf16, or fp16 in a build for sm_75, kept as exact floats), the references (the double CPU
// reference for small shapes, the float32 GPU reference of common/ for large ones), tolerances with
// their derivation, the forward and backward case runners, and the diagnoses that name the planted
// bugs' symptoms before the numbers.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "course/baselines.h"
#include "course/bf16.h"
#include "course/launch.h"
#include "course/reference/attention.h"
#include "course/reference/attention_gpu.h"
#include "course/testing.h"

namespace attention_checks {

using course::reference::AttentionShape;

constexpr double kUnitRoundoff = 0x1.0p-24;  // float32
// Two roundings to the tensor-core exercises' element, relatively: bf16, or fp16 in a build for
// sm_75 (course/bf16.h, course/tensor_element.h).
using course::kTensorRoundoff;

// ---- That element on the host (course/bf16.h) ----

using course::as_tensor;
using course::from_tensor_element;
using course::sign_flipped;
using course::tensor_bits;
using course::tensor_values;
using course::to_tensor_element;

// ---- Inputs ----

struct Case {
    AttentionShape shape;
    bool causal = false;
    // Queries are drawn from [-2 boost, 2 boost]: boost 100 makes scores of hundreds, whose exp
    // overflows float unless the row maximum is taken out first.
    float boost = 1.0f;
    float scale() const { return 1.0f / std::sqrt(static_cast<float>(shape.D)); }
    // A bound on |scale * q . k| that holds with a wide margin for these inputs (their dot
    // products are sums of D terms of random sign: a few standard deviations).
    double largest_score() const {
        return scale() * (2.0 * boost) * 2.0 * std::sqrt(static_cast<double>(shape.D)) * 4.0;
    }
    std::string describe() const {
        return "B = " + std::to_string(shape.batch) + ", H = " + std::to_string(shape.heads) +
               ", T = " + std::to_string(shape.T) + ", D = " + std::to_string(shape.D) +
               (causal ? ", causal" : ", not causal") +
               (boost != 1.0f ? ", scores in the hundreds (exp overflows without the max)" : "");
    }
};

struct Inputs {
    std::vector<float> Q, K, V, dO;  // 16-bit values when made for a tensor-core exercise
};

inline std::vector<float> random_values(std::size_t n, float magnitude, bool sixteen_bit,
                                        course::Rng& rng) {
    auto values = course::random_floats(n, -magnitude, magnitude, rng);
    if (sixteen_bit)
        for (float& v : values) v = from_tensor_element(to_tensor_element(v));
    return values;
}

inline Inputs make_inputs(const Case& c, bool sixteen_bit, course::Rng& rng) {
    const std::size_t n = c.shape.elements();
    return {random_values(n, 2.0f * c.boost, sixteen_bit, rng),
            random_values(n, 2.0f, sixteen_bit, rng), random_values(n, 1.0f, sixteen_bit, rng),
            random_values(n, 1.0f, sixteen_bit, rng)};
}

// Shapes the CPU reference computes in a second or two; the others use the GPU reference.
inline bool small_enough_for_cpu(const AttentionShape& s) {
    return static_cast<double>(s.heads_total()) * s.T * s.T * s.D <= 6e8;
}

// ---- References ----

struct Forward {
    std::vector<double> O, L;
};

// The forward's O and L: the double CPU reference, or for large shapes the float32 GPU one
// (course/reference/attention_gpu.h).
inline Forward reference_forward(const Inputs& in, const Case& c) {
    if (small_enough_for_cpu(c.shape)) {
        auto out =
            course::reference::attention_forward(in.Q, in.K, in.V, c.shape, c.scale(), c.causal);
        return {std::move(out.O), std::move(out.L)};
    }
    course::DeviceBuffer<float> Q("reference Q", in.Q), K("reference K", in.K),
        V("reference V", in.V), O("reference O", c.shape.elements()),
        L("reference L", c.shape.rows());
    course::reference::gpu::attention_forward(Q.data(), K.data(), V.data(), O.data(), L.data(),
                                              c.shape, c.scale(), c.causal);
    const auto o = O.download(), l = L.download();
    return {std::vector<double>(o.begin(), o.end()), std::vector<double>(l.begin(), l.end())};
}

struct Gradients {
    std::vector<double> dQ, dK, dV;
};

// The backward's reference. `O` and `L` are the forward's (what the exercise is given).
inline Gradients reference_backward(const Inputs& in, const std::vector<float>& O,
                                    const std::vector<float>& L, const Case& c) {
    if (small_enough_for_cpu(c.shape)) {
        auto g = course::reference::attention_backward(in.Q, in.K, in.V, in.dO, c.shape, c.scale(),
                                                       c.causal, &O);
        return {std::move(g.dQ), std::move(g.dK), std::move(g.dV)};
    }
    const std::size_t n = c.shape.elements();
    course::DeviceBuffer<float> Q("reference Q", in.Q), K("reference K", in.K),
        V("reference V", in.V), dO("reference dO", in.dO), dO_O("reference O", O),
        dL("reference L", L), dQ("reference dQ", n), dK("reference dK", n), dV("reference dV", n);
    course::reference::gpu::attention_backward(Q.data(), K.data(), V.data(), dO_O.data(), dL.data(),
                                               dO.data(), dQ.data(), dK.data(), dV.data(), c.shape,
                                               c.scale(), c.causal);
    const auto q = dQ.download(), k = dK.download(), v = dV.download();
    return {{q.begin(), q.end()}, {k.begin(), k.end()}, {v.begin(), v.end()}};
}

// ---- Tolerances ----
// O_i = sum_j p_j v_j / l with p_j = exp(s_j - m), |v| <= 1:
//  - float32: l and O are sums of up to T terms (a random walk of sqrt(T) roundings: 16 u sqrt(T)
//    covers any order, as Tolerance::float32), and exp(s_j - m) inherits the rounding of s_j, a
//    relative u |s_j| (8 u times the largest score covers it, exp's own error included).
//  - bf16: P is rounded to bf16 before it multiplies V (a relative 2^-9 per term) and O is
//    rounded to bf16 (2^-9): 2^-8 absolute and relative is twice the worst of the two together.
//    fp16 (a build for sm_75) the same with its 2^-11: 2^-10 (kTensorRoundoff).
//  - L = m + log l: the same float32 terms, absolute (log turns relative errors of l into
//    absolute ones), plus 8 u relative for |m|.
// Against the float32 GPU reference, whose own error is of the same size, the float32 bounds
// double. A key missing from a row (a dropped tile) moves L by log(1 + 1/T) ~ 1/T, far outside.
inline double float32_bound(const Case& c) {
    return kUnitRoundoff *
           (16.0 * std::sqrt(static_cast<double>(c.shape.T)) + 8.0 * c.largest_score());
}
inline course::Tolerance output_tolerance(const Case& c, bool sixteen_bit) {
    if (sixteen_bit) return {kTensorRoundoff, kTensorRoundoff};
    const double bound = (small_enough_for_cpu(c.shape) ? 1.0 : 2.0) * float32_bound(c);
    return {bound, bound};
}
inline course::Tolerance lse_tolerance(const Case& c) {
    const double factor = small_enough_for_cpu(c.shape) ? 1.0 : 2.0;
    return {factor * float32_bound(c), factor * 8.0 * kUnitRoundoff};
}
// Gradients: sums over up to T products of bf16-rounded P or dS (2^-9 relative each, random in
// sign; the references take D_i from the same bf16 O the exercise gets; fp16's roundings are 4
// times smaller, so the bounds below hold for it too): errors of about 2^-9 of
// the terms. Where the terms are of the gradient's size, 2^-6 of its root mean square leaves a
// margin of 8. Large scores make P nearly one-hot: a few rows then carry large dS of opposite
// signs whose rounding errors do not cancel, while most gradients are near 0 (a small RMS): 2^-7
// of the largest gradient covers those rows. A lost contribution (a key tile dropped, a race on
// dQ) is of the gradient's own size. The 2^-16 floor is for gradients that are exactly 0 (T = 1:
// dS = P (dP - D) = 0), where the exercise's float32 dP - D leaves a few ulp.
inline course::Tolerance gradient_tolerance(const std::vector<double>& reference) {
    double squares = 0.0, largest = 0.0;
    for (double g : reference) {
        squares += g * g;
        largest = std::max(largest, std::fabs(g));
    }
    const double rms =
        std::sqrt(squares / static_cast<double>(std::max<std::size_t>(1, reference.size())));
    return {0x1.0p-6 * rms + 0x1.0p-7 * largest + 0x1.0p-16, 0x1.0p-6};
}

// ---- Diagnoses ----

inline std::string replay_note() {
    return "inputs from seed " + std::to_string(course::run_seed()) +
           ": GRADER_SEED=" + std::to_string(course::run_seed()) + " replays them";
}

template <class T>
std::size_t differing(const std::vector<T>& a, const std::vector<T>& b) {
    std::size_t count = 0;
    for (std::size_t i = 0; i < a.size(); ++i) count += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
    return count;
}

inline std::string race_diagnosis(std::size_t differing_elements, const std::string& name) {
    if (differing_elements == 0) return "";
    return "`" + name + "` differs between two identical runs at " +
           std::to_string(differing_elements) +
           " elements: a race, or a read of memory nothing wrote. Is there a __syncthreads() "
           "between the last read of a shared K/V (or Q/dO) tile and the copy that overwrites it "
           "with the next tile? Does every load stay inside its rows (j < T)?";
}

// L_i over only the keys j < key_end (and, causal, j <= i): what a kernel computes when it drops
// the keys from key_end on.
inline double truncated_lse(const Inputs& in, const Case& c, std::size_t row, std::size_t key_end) {
    const std::size_t T = c.shape.T, D = c.shape.D, head = row / T, i = row % T;
    const std::size_t end = c.causal ? std::min(key_end, i + 1) : key_end;
    if (end == 0) return -std::numeric_limits<double>::infinity();
    std::vector<double> s(end);
    double max = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < end; ++j) {
        double dot = 0.0;
        for (std::size_t d = 0; d < D; ++d)
            dot += static_cast<double>(in.Q[row * D + d]) * in.K[(head * T + j) * D + d];
        s[j] = c.scale() * dot;
        max = std::max(max, s[j]);
    }
    double sum = 0.0;
    for (double v : s) sum += std::exp(v - max);
    return max + std::log(sum);
}

// A tile size (16, 32, 64 or 128) whose last, partial tile the kernel seems to drop: the checked
// wrong rows all have the L of the keys before that tile. 0 when none fits.
inline std::size_t dropped_tile(const std::vector<float>& got_L,
                                const std::vector<std::size_t>& rows, const Inputs& in,
                                const Case& c, const course::Tolerance& l_tol) {
    for (std::size_t tile : {16, 32, 64, 128}) {
        const std::size_t key_end = c.shape.T / tile * tile;
        if (key_end == c.shape.T) continue;
        bool fits = true;
        for (std::size_t r : rows)
            fits = fits && l_tol.accepts(got_L[r], truncated_lse(in, c, r, key_end));
        if (fits) return tile;
    }
    return 0;
}

// L_i over the keys a row sees plus `extra` keys whose scores are 0 (what a kernel computes when
// the zeros its last tile holds past T are not masked).
inline double lse_with_zero_scores(double L, std::size_t extra) {
    return L + std::log1p(static_cast<double>(extra) * std::exp(-L));
}

// A tile size (16, 32, 64 or 128) whose padding past T the kernel seems to count as keys with
// score 0: the checked wrong rows all have that L. 0 when none fits.
inline std::size_t unmasked_padding_tile(const std::vector<float>& got_L,
                                         const std::vector<std::size_t>& rows, const Forward& want,
                                         const Case& c, const course::Tolerance& l_tol) {
    for (std::size_t tile : {16, 32, 64, 128}) {
        const std::size_t padding = (c.shape.T + tile - 1) / tile * tile - c.shape.T;
        if (padding == 0) continue;
        bool fits = true;
        for (std::size_t r : rows)
            fits = fits && l_tol.accepts(got_L[r], lse_with_zero_scores(want.L[r], padding));
        if (fits) return tile;
    }
    return 0;
}

// Whether every checked wrong row of O is the right row times one factor above 1 (each row its
// own): the sum o_i before its division by l_i.
inline bool rows_scaled_up(const std::vector<float>& got_O, const Forward& want,
                           const std::vector<std::size_t>& rows, std::size_t D,
                           const course::Tolerance& o_tol) {
    for (std::size_t r : rows) {
        double cross = 0.0, squares = 0.0;
        for (std::size_t d = 0; d < D; ++d) {
            cross += got_O[r * D + d] * want.O[r * D + d];
            squares += want.O[r * D + d] * want.O[r * D + d];
        }
        const double factor = squares > 0 ? cross / squares : 0.0;
        if (!(factor > 1.01)) return false;
        for (std::size_t d = 0; d < D; ++d)
            if (!o_tol.accepts(got_O[r * D + d] / factor, want.O[r * D + d])) return false;
    }
    return true;
}

// Whether query 0 of a causal head looks like a mask off by one: it sees no key at all (L not
// finite), or keys 0 and 1 (L of both).
inline bool row_zero_mask_off_by_one(const std::vector<float>& got_L, std::size_t row,
                                     const Case& c, const course::Tolerance& l_tol,
                                     const Inputs* in) {
    if (!std::isfinite(got_L[row])) return true;
    Case unmasked = c;  // truncated_lse masks row 0 down to key 0 when causal
    unmasked.causal = false;
    return in && c.shape.T > 1 && l_tol.accepts(got_L[row], truncated_lse(*in, unmasked, row, 2));
}

// What a wrong forward output says about the kernel, in the order the planted bugs are most
// easily told apart. `got_O`, `got_L` are what the exercise wrote (floats; 16-bit values
// converted); `in` the inputs, where the case is small enough to recompute rows on the CPU (else
// nullptr).
inline std::string forward_diagnosis(const std::vector<float>& got_O,
                                     const std::vector<float>& got_L, const Forward& want,
                                     const Case& c, const course::Tolerance& o_tol,
                                     const course::Tolerance& l_tol, const Inputs* in) {
    const std::size_t rows = c.shape.rows(), D = c.shape.D, T = c.shape.T;
    if (std::all_of(got_L.begin(), got_L.end(), [](float v) { return course::is_poison(v); }))
        return "L was never written: save each row's logsumexp, L_i = m_i + log(l_i) (the "
               "backward pass recomputes P from it)";
    const auto L_ok = [&](std::size_t r) { return l_tol.accepts(got_L[r], want.L[r]); };
    const auto O_ok = [&](std::size_t r) {
        for (std::size_t d = 0; d < D; ++d)
            if (!o_tol.accepts(got_O[r * D + d], want.O[r * D + d])) return false;
        return true;
    };
    if (c.causal) {
        for (std::size_t r = 0; r < rows; r += T)
            if (!(L_ok(r) && O_ok(r)) && row_zero_mask_off_by_one(got_L, r, c, l_tol, in))
                return "row 0 of head " + std::to_string(r / T) +
                       " is wrong the way a mask off by one makes it: query 0 sees key 0 only "
                       "(every other key is masked), so O_0 = v_0 and L_0 = s_00. Key j is "
                       "visible to query i when j <= i, its own position included.";
    }
    bool L_right = true, O_right = true, L_all_low = true, L_all_high = true, non_finite = false;
    std::vector<std::size_t> wrong_rows;
    std::size_t first_wrong_position = T;
    for (std::size_t r = 0; r < rows; ++r) {
        const bool l_ok = L_ok(r), o_ok = O_ok(r);
        if (l_ok && o_ok) continue;
        if (wrong_rows.size() < 8) wrong_rows.push_back(r);
        first_wrong_position = std::min(first_wrong_position, r % T);
        L_right = L_right && l_ok;
        O_right = O_right && o_ok;
        if (!(got_L[r] < want.L[r])) L_all_low = false;
        if (!(got_L[r] > want.L[r])) L_all_high = false;
        if (!std::isfinite(got_L[r])) non_finite = true;
        for (std::size_t d = 0; d < D; ++d)
            if (!std::isfinite(got_O[r * D + d]) && !course::is_poison(got_O[r * D + d]))
                non_finite = true;
    }
    if (wrong_rows.empty()) return "";
    if (in) {
        if (dropped_tile(got_L, wrong_rows, *in, c, l_tol) != 0)
            return "L is what the keys before the last, partial K/V tile give: is that tile "
                   "skipped (T = " +
                   std::to_string(T) +
                   " is not a multiple of the tile size; round the number of K/V tiles up and "
                   "mask the keys past T)?";
    }
    if (const std::size_t tile = unmasked_padding_tile(got_L, wrong_rows, want, c, l_tol))
        return "L counts " + std::to_string((T + tile - 1) / tile * tile - T) +
               " keys too many, each with score 0: the zeros the last K/V tile holds past T = " +
               std::to_string(T) +
               " take part in the softmax. Mask the keys past T (score -inf) as the causal ones";
    if (L_right && rows_scaled_up(got_O, want, wrong_rows, D, o_tol))
        return "L is right in every row, and each wrong row of O is the right one times a factor "
               "above 1: O is the running sum o, not divided by l at the end (O_i = o_i / l_i)";
    if (L_right)
        return "L is right in every row but O is not: the weights are right (L is their sum), "
               "so what they meet is not. The running output o must be rescaled by "
               "exp(m_old - m_new) whenever a K/V tile raises the row maximum, as the running "
               "sum l is, and P must meet the V tile of the keys its scores came from (the "
               "same tile, stage and head)";
    if (O_right)
        return "O is right in every row but L is not: L_i = m_i + log(l_i), the largest scaled "
               "score of the whole row (scale applied; the running maximum m carried from tile "
               "to tile, max(m_old, tile max)) plus the log of the sum of exp(s - m_i)";
    if (non_finite && c.boost == 1.0f)
        return "O or L holds inf or NaN, and no score of this case is large enough to overflow "
               "exp: a value read from shared memory before it landed (is there a "
               "__syncthreads() after the copies' wait, cp.async.wait_group or the loads? a "
               "thread's wait covers its own copies only), or a row that sees no key";
    if (non_finite)
        return "O or L holds inf or NaN: exp overflowed, or a sum is 0. Is the row maximum "
               "subtracted before exp (scores here reach " +
               std::to_string(static_cast<int>(c.largest_score() / 4)) +
               " and more), and does every row see at least one key?";
    if (L_all_high)
        return "L is too large in every wrong row: terms that do not belong were added to the "
               "sums (keys past T or above the diagonal not masked, a tile counted twice?)";
    return std::string(c.causal && first_wrong_position >= 8
                           ? "rows with few keys are right, rows that see more K/V tiles are wrong"
                       : L_all_low
                           ? "L is too small in every wrong row: terms went missing from the sums"
                           : "O and L are wrong") +
           ": is the running maximum m carried from tile to tile, with l and o rescaled by "
           "exp(m_old - m_new) where m_new = max(m_old, tile max)?";
}

// ---- The forward cases ----

// Runs the exercise on device buffers it is given; `Out` is float (fp32 exercises) or uint16_t
// (16-bit bits: bf16 or fp16).
template <class Elem>
using ForwardRun =
    std::function<void(const course::DeviceBuffer<Elem>& Q, const course::DeviceBuffer<Elem>& K,
                       const course::DeviceBuffer<Elem>& V, course::DeviceBuffer<Elem>& O,
                       course::DeviceBuffer<float>& L, const Case& c)>;

template <class Elem>
std::vector<Elem> device_values(const std::vector<float>& values) {
    if constexpr (std::is_same_v<Elem, float>)
        return values;
    else
        return tensor_bits(values);
}
template <class Elem>
std::vector<float> host_values(const std::vector<Elem>& got) {
    if constexpr (std::is_same_v<Elem, float>)
        return got;
    else
        return tensor_values(got);
}

// One case: the exercise runs twice on the same inputs (outputs poisoned before each run); both
// runs must give the same bits, and O and L must match the reference.
template <class Elem>
void check_forward(const ForwardRun<Elem>& run, const Case& c, course::Rng& rng) {
    SCOPED_TRACE(c.describe());
    constexpr bool sixteen_bit = !std::is_same_v<Elem, float>;
    const Inputs in = make_inputs(c, sixteen_bit, rng);
    course::DeviceBuffer<Elem> Q("Q", device_values<Elem>(in.Q)), K("K", device_values<Elem>(in.K)),
        V("V", device_values<Elem>(in.V)), O("O", c.shape.elements());
    course::DeviceBuffer<float> L("L", c.shape.rows());
    const auto once = [&] {
        O.poison();
        L.poison();
        run(Q, K, V, O, L, c);
        return std::make_pair(O.download(), L.download());
    };
    const auto first = once(), second = once();
    const std::vector<float> L2 = second.second;
    const std::vector<Elem> O2 = second.first;
    const std::string race = race_diagnosis(
        differing(first.first, O2) + differing(first.second, L2), "O and L together");
    const Forward want = reference_forward(in, c);
    const auto got_O = host_values<Elem>(O2);
    const auto o_tol = output_tolerance(c, sixteen_bit), l_tol = lse_tolerance(c);
    course::CompareOptions o_options{"O", course::Matrix{c.shape.rows(), c.shape.D}};
    o_options.diagnose = [&] {
        return race.empty() ? forward_diagnosis(got_O, L2, want, c, o_tol, l_tol,
                                                small_enough_for_cpu(c.shape) ? &in : nullptr)
                            : race;
    };
    course::CompareOptions l_options{"L", course::Matrix{c.shape.heads_total(), c.shape.T}};
    l_options.diagnose = o_options.diagnose;
    EXPECT_TRUE(course::expect_close(L2, want.L, l_tol, l_options)) << replay_note();
    EXPECT_TRUE(course::expect_close(got_O, want.O, o_tol, o_options)) << replay_note();
    EXPECT_TRUE(race.empty()) << race;
}

// The grid: T around the tile sizes (a single key, partial last tiles) and up to 1000,
// D 64 and 128, causal and not, B and H not 1; against the double CPU reference.
inline constexpr std::size_t kEdgeLengths[] = {1, 17, 63, 64, 65, 1000};
// The long sequence, against the float32 GPU reference (a test of its own: it skips on the CPU
// emulator).
inline constexpr std::size_t kLongLength = 4096;

template <class Elem>
void edge_shapes(const ForwardRun<Elem>& run, course::Rng& rng) {
    for (std::size_t D : {64, 128})
        for (std::size_t T : kEdgeLengths)
            for (bool causal : {false, true})
                check_forward<Elem>(run, Case{{2, 2, T, D}, causal}, rng);
}

template <class Elem>
void long_sequence(const ForwardRun<Elem>& run, course::Rng& rng) {
    for (std::size_t D : {64, 128})
        for (bool causal : {false, true})
            check_forward<Elem>(run, Case{{2, 2, kLongLength, D}, causal}, rng);
}

// The contract's most heads, 5 x 13107 = 65535 (a grid of one block column per head along y just
// fits), each short: T = 3.
template <class Elem>
void most_heads(const ForwardRun<Elem>& run, course::Rng& rng) {
    COURSE_SKIP_ON_EMULATOR("65535 heads");
    for (bool causal : {false, true})
        check_forward<Elem>(run, Case{{5, 13107, 3, 64}, causal}, rng);
}

// Then scores large enough that exp overflows without the row maximum.

template <class Elem>
void large_scores(const ForwardRun<Elem>& run, course::Rng& rng) {
    for (std::size_t T : {65, 300})
        for (bool causal : {false, true})
            check_forward<Elem>(run, Case{{2, 3, T, 64}, causal, 100.0f}, rng);
}

// FLOPs as the FlashAttention papers count them: two T x T x D products, 4 B H T^2 D, halved
// when causal (only the visible half is needed).
inline double forward_flops(const Case& c) {
    const AttentionShape& s = c.shape;
    return 4.0 * s.heads_total() * static_cast<double>(s.T) * s.T * s.D * (c.causal ? 0.5 : 1.0);
}

inline std::string perf_label(const Case& c) {
    return "B" + std::to_string(c.shape.batch) + " H" + std::to_string(c.shape.heads) + " T" +
           std::to_string(c.shape.T) + " D" + std::to_string(c.shape.D) +
           (c.causal ? " causal" : "");
}

// The timed output against the GPU reference, every element.
template <class Elem>
void check_timed_forward(const course::DeviceBuffer<Elem>& O, const course::DeviceBuffer<float>& L,
                         const Inputs& in, const Case& c) {
    const Forward want = reference_forward(in, c);
    const auto got_O = host_values<Elem>(O.download());
    const auto got_L = L.download();
    constexpr bool sixteen_bit = !std::is_same_v<Elem, float>;
    const auto o_tol = output_tolerance(c, sixteen_bit), l_tol = lse_tolerance(c);
    course::CompareOptions options{"O (timed)", course::Matrix{c.shape.rows(), c.shape.D}};
    options.diagnose = [&] {
        return forward_diagnosis(got_O, got_L, want, c, o_tol, l_tol, nullptr);
    };
    EXPECT_TRUE(course::expect_close(got_L, want.L, l_tol, {"L (timed)"}));
    EXPECT_TRUE(course::expect_close(got_O, want.O, o_tol, options));
}

// The T at which one head's T x T scores, `element_bytes` each (4: float; 2: bf16 or fp16, the
// smallest a kernel could keep them in), would not fit in this GPU's memory, rounded up to a
// multiple of 1024.
inline std::size_t t_beyond_memory(std::size_t element_bytes) {
    const double bytes = static_cast<double>(course::gpu().global_memory_bytes);
    const auto T = static_cast<std::size_t>(std::sqrt(bytes / element_bytes)) + 1;
    return (T + 1023) / 1024 * 1024;
}

// The case of one head whose T x T scores would not fit in memory, even in 16 bits for the
// tensor-core exercises, and its description.
inline Case no_scores_case(bool sixteen_bit, bool causal) {
    return Case{{1, 1, t_beyond_memory(sixteen_bit ? 2 : 4), 64}, causal};
}
inline std::string no_scores_note(const Case& c, bool sixteen_bit) {
    const double T = static_cast<double>(c.shape.T);
    return c.describe() + ": a T x T " +
           (sixteen_bit ? std::string(course::kTensorElementName) : "float") +
           " buffer would need " + std::to_string(T * T * (sixteen_bit ? 2 : 4) / 1e9) +
           " GB, more than this GPU has";
}

// Rows to check of a case too long for a full reference: the first two, the last, and 6 random.
inline std::vector<std::size_t> sampled_rows(std::size_t T, course::Rng& rng) {
    std::vector<std::size_t> rows{0, 1, T - 1};
    for (int k = 0; k < 6; ++k)
        rows.push_back(
            static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(T) - 1)));
    return rows;
}

// One head whose scores would not fit in memory: the flash kernels must still run, and sampled
// rows must match the CPU reference.
template <class Elem>
void no_scores_buffer(const ForwardRun<Elem>& run, bool causal, course::Rng& rng) {
    constexpr bool sixteen_bit = !std::is_same_v<Elem, float>;
    const Case c = no_scores_case(sixteen_bit, causal);
    const std::size_t T = c.shape.T;
    SCOPED_TRACE(no_scores_note(c, sixteen_bit));
    const Inputs in = make_inputs(c, sixteen_bit, rng);
    course::DeviceBuffer<Elem> Q("Q", device_values<Elem>(in.Q)), K("K", device_values<Elem>(in.K)),
        V("V", device_values<Elem>(in.V)), O("O", c.shape.elements());
    course::DeviceBuffer<float> L("L", c.shape.rows());
    course::with_note_on_cuda_error(no_scores_note(c, sixteen_bit), [&] { run(Q, K, V, O, L, c); });
    const auto got_O = host_values<Elem>(O.download());
    const auto got_L = L.download();
    const auto rows = sampled_rows(T, rng);
    const auto o_tol = output_tolerance(c, sixteen_bit), l_tol = lse_tolerance(c);
    for (std::size_t row : rows) {
        const auto want = course::reference::attention_forward_row(in.Q, in.K, in.V, c.shape,
                                                                   c.scale(), causal, row);
        const std::vector<float> got(got_O.begin() + row * 64, got_O.begin() + (row + 1) * 64);
        ASSERT_TRUE(course::expect_close(got, want.O, o_tol, {"O row " + std::to_string(row)}));
        ASSERT_TRUE(course::expect_close(std::vector<float>{got_L[row]}, want.L, l_tol,
                                         {"L row " + std::to_string(row)}));
    }
}

// The T = 4096 shape the module is timed at.
inline Case timed_case(std::size_t D, bool causal) { return Case{{4, 16, 4096, D}, causal}; }

// ---- Timed cases: the baseline ----

// A library call timed beside the exercise, bound to one problem's buffers, under the name the
// results table shows.
struct BaselineCall {
    std::string name;
    std::function<void()> run;
};

// The first of `calls` that runs here, each tried with one call outside the timing: cuDNN's fused
// attention where this build has cuDNN and cuDNN an engine for the shape, else cuBLAS's
// materialized attention. Why one is passed over is printed (run the checker by hand to read
// it); the results table names the baseline a case was timed against, and a target is judged
// only against the manifest's. The last call is not tried here: its errors are the test's.
inline const BaselineCall& first_that_runs(const std::vector<BaselineCall>& calls) {
    for (std::size_t i = 0; i + 1 < calls.size(); ++i) {
        try {
            calls[i].run();
            return calls[i];
        } catch (const std::exception& error) {
            std::cout << "[ baseline ] " << calls[i].name << " does not run here (" << error.what()
                      << "): timed against " << calls[i + 1].name << " instead" << std::endl;
        }
    }
    return calls.back();
}

// ---- Timed forward cases ----

// Runs a library's attention on Q, K, V into outputs of its own (O and L).
template <class Elem>
using BaselineRun =
    std::function<void(const course::DeviceBuffer<Elem>& Q, const course::DeviceBuffer<Elem>& K,
                       const course::DeviceBuffer<Elem>& V, course::DeviceBuffer<Elem>& O,
                       course::DeviceBuffer<float>& L, const Case& c)>;
// The libraries a forward case may be timed against, each with its name, in order of preference.
template <class Elem>
using Baselines = std::vector<std::pair<std::string, BaselineRun<Elem>>>;

// Times the exercise against the first of `baselines` that runs here (both on the same inputs,
// samples interleaved; Q's signs flipped on the exercise's calls at random), checks that every
// timed call computed O and L, then the timed output against the GPU reference, and records the
// FLOP rate.
template <class Elem>
course::PairTiming time_forward(const ForwardRun<Elem>& run, const Baselines<Elem>& baselines,
                                const Case& c, course::Rng& rng) {
    SCOPED_TRACE(c.describe());
    constexpr bool sixteen_bit = !std::is_same_v<Elem, float>;
    const std::size_t n = c.shape.elements(), rows = c.shape.rows();
    const Inputs in = make_inputs(c, sixteen_bit, rng);
    course::DeviceBuffer<Elem> Q("Q", device_values<Elem>(in.Q)), K("K", device_values<Elem>(in.K)),
        V("V", device_values<Elem>(in.V)), O("O", n), O_baseline("baseline O", n);
    course::DeviceBuffer<float> L("L", rows), L_baseline("baseline L", rows);
    std::vector<BaselineCall> calls;
    for (const auto& [name, baseline] : baselines)
        calls.push_back(
            {name, [&, baseline = baseline] { baseline(Q, K, V, O_baseline, L_baseline, c); }});
    const BaselineCall& baseline = first_that_runs(calls);
    const auto timing =
        course::time_against([&] { run(Q, K, V, O, L, c); }, baseline.run,
                             {course::TimedOutput(O, output_tolerance(c, sixteen_bit)),
                              course::TimedOutput(L, lse_tolerance(c))},
                             {sign_flipped(Q)});
    check_timed_forward(O, L, in, c);
    course::record_flops(
        perf_label(c), timing, forward_flops(c), baseline.name, forward_flops(c),
        sixteen_bit ? course::kTensorFlopUnits : course::FlopUnits::fp32_cuda_cores);
    return timing;
}

// A library's 16-bit attention (cuDNN's and cuBLAS's share this signature) as a timed baseline.
using Attention16 = void (*)(const std::uint16_t* Q, const std::uint16_t* K, const std::uint16_t* V,
                             std::uint16_t* O, float* L, int batch, int heads, int T, int D,
                             float scale, bool causal);
inline BaselineRun<std::uint16_t> baseline_16(Attention16 attention) {
    return
        [attention](const auto& Q, const auto& K, const auto& V, auto& O, auto& L, const Case& c) {
            const auto& s = c.shape;
            attention(Q.data(), K.data(), V.data(), O.data(), L.data(), static_cast<int>(s.batch),
                      static_cast<int>(s.heads), static_cast<int>(s.T), static_cast<int>(s.D),
                      c.scale(), c.causal);
        };
}

// Device memory a timed forward case needs besides the baselines' scratch: inputs, two outputs
// and the harness's copies (two of each), the GPU reference's float copies, and the L2 flush
// buffer.
inline std::size_t timed_forward_bytes(const Case& c) {
    return 16 * c.shape.elements() * sizeof(float) + (512u << 20);
}
// The cuBLAS baseline's T x T scores and probabilities (float32 each, at most); cuDNN's fused
// attention, tried first where there is one, needs far less.
inline std::size_t scores_bytes(const Case& c) {
    return c.shape.heads_total() * c.shape.T * c.shape.T * sizeof(float);
}

// ---- The float32 exercises ----

// flash_forward and flash_causal share one signature.
using FlashF32 = void (*)(const float* Q, const float* K, const float* V, float* O, float* L,
                          int batch, int heads, int T, int D, float scale, bool causal);

inline ForwardRun<float> flash_f32_run(FlashF32 flash) {
    return [flash](const auto& Q, const auto& K, const auto& V, auto& O, auto& L, const Case& c) {
        const auto& s = c.shape;
        flash(Q.data(), K.data(), V.data(), O.data(), L.data(), static_cast<int>(s.batch),
              static_cast<int>(s.heads), static_cast<int>(s.T), static_cast<int>(s.D), c.scale(),
              c.causal);
    };
}

// cuBLAS's materialized float32 attention (it writes no L).
inline void cublas_f32(const course::DeviceBuffer<float>& Q, const course::DeviceBuffer<float>& K,
                       const course::DeviceBuffer<float>& V, course::DeviceBuffer<float>& O,
                       course::DeviceBuffer<float>&, const Case& c) {
    const auto& s = c.shape;
    course::baseline::cublas_attention_f32(Q.data(), K.data(), V.data(), O.data(),
                                           static_cast<int>(s.batch), static_cast<int>(s.heads),
                                           static_cast<int>(s.T), static_cast<int>(s.D), c.scale(),
                                           c.causal);
}

// The timed case of a float32 flash exercise: B 4, H 16, T 4096 against cuBLAS.
inline void rate_f32(const ForwardRun<float>& run, std::size_t D, bool causal, course::Rng& rng) {
    const Case c = timed_case(D, causal);
    COURSE_REQUIRE_MEMORY(2 * scores_bytes(c) + timed_forward_bytes(c));
    time_forward<float>(run, {{"cublas_attention_f32", cublas_f32}}, c, rng);
}

// The fixture of the Hopper exercises (flash_wgmma, flash_wgmma_backward): skips on any GPU but
// compute capability 9.0 (wgmma, TMA and setmaxnreg exist in sm_90a code only), where this build's
// device code is not sm_90a, and in a tree that also builds for sm_75 (its tensor-core inputs are
// fp16: course/tensor_element.h; these contracts are bf16). kProbe is a kernel of the checker's
// own file, whose device code is built with the exercise's flags (sm_90a in a tree built for
// Hopper: cmake/Course.cmake).
template <void (*kProbe)()>
class HopperTest : public course::GpuTest {
  protected:
    void SetUp() override {
        const course::GpuInfo& g = course::gpu();
        if (g.available && g.sm != 90) {
            skip("needs a Hopper GPU (sm_90a: wgmma, TMA, setmaxnreg); " + g.name + " is " +
                 std::to_string(g.sm / 10) + "." + std::to_string(g.sm % 10));
            return;
        }
        course::GpuTest::SetUp();
        if (IsSkipped()) return;
        // A tree built for an older architecture runs PTX without the Hopper instructions.
        const int built = course::compiled_arch(kProbe);
        if (built != 90 || course::kFp16TensorCores)
            skip("needs device code for sm_90a (wgmma, TMA): this build is for sm_" +
                 std::to_string(built) + (course::kFp16TensorCores ? ", in fp16" : "") +
                 ": rebuild the grader's tree for this GPU (cmake build/<tree> "
                 "-DCMAKE_CUDA_ARCHITECTURES=90)");
    }

  private:
    void skip(const std::string& reason) {
        RecordProperty("skip_reason", reason);
        GTEST_SKIP() << reason;
    }
};

}  // namespace attention_checks

// Skips the running test under exact allocations (compute-sanitizer): for a case that would
// take minutes there.
#define ATTENTION_SKIP_UNDER_SANITIZER(why)                                   \
    do {                                                                      \
        if (::course::exact_allocations()) {                                  \
            const std::string attention_reason =                              \
                std::string(why) + ": too slow under compute-sanitizer";      \
            ::testing::Test::RecordProperty("skip_reason", attention_reason); \
            GTEST_SKIP() << attention_reason;                                 \
        }                                                                     \
    } while (0)
