// Checker of 10_inference/speculative_verify: accepted counts and tokens on fixed uniforms
// against the double CPU reference (course/reference/inference.h), with every uniform at least
// 1e-4 away from its boundary (p / q, or a step of the cumulative residual): batches of 1 to 256
// sequences, gamma 1 to 16, vocabularies of 1 to 2^18; drafts close to the target, equal to it
// (all accepted: the bonus token), disjoint from it (all rejected: the residual is the target),
// a target that keeps 10 tokens, peaked rows of 50304 and 128256 tokens; q is followed by NaN
// rows (a read of q with p's row stride shows as a rejection). A failure names the known
// mistakes (the residual not renormalized, q read at p's rows in the counts or in the draws, the
// residual drawn from p, the bonus token missing, the draws shifted by mass missing before the
// token or at the row's end).
// Then the distribution: 65536 sequences with the same target and draft, the drafts drawn from q:
// the first token against p_0 and the second, where the first was accepted, against p_1
// (chi-square, a false alarm once in a million runs), and the acceptance rate against sum min(p,
// q). Then the bandwidth on the rows the verification must read (the target's and the draft's at
// the first rejection, or the target's last), at 64 sequences of 128256 tokens, gamma 4 (judged),
// and 16 of 50304, gamma 8 (shown), against a device copy of those bytes.
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
#include "speculative_verify.h"

namespace {

namespace ref = course::reference;

// How far from a boundary every uniform lies (speculative_verify.h), and the least residual
// mass the inputs allow.
constexpr double kMargin = 1e-4;
constexpr double kMinResidualMass = 1e-3;

// spread: random logits, the draft's the target's plus noise (about half accepted); peaked: 32
// tokens far above the rest, as a language model's few likely next tokens; equal: q == p (all
// accepted, the bonus token); disjoint: the draft's mass only where the target has none (all
// rejected, the residual is p); sparse: the target keeps 10 tokens, the draft spreads.
enum class Rows { spread, peaked, equal, disjoint, sparse };

struct Case {
    std::size_t batch, gamma, vocab;
    Rows rows = Rows::spread;
    std::string describe() const {
        const char* kinds[] = {"spread", "peaked", "q == p", "q disjoint from p", "p keeps 10"};
        return std::to_string(batch) + " sequences, gamma " + std::to_string(gamma) + ", vocab " +
               std::to_string(vocab) + " (" + kinds[static_cast<int>(rows)] + ")";
    }
};

struct Inputs {
    std::vector<float> p, q;  // [batch][gamma + 1][vocab], [batch][gamma][vocab]
    std::vector<int> drafts;  // [batch][gamma]
    std::vector<float> uniforms, residual_uniforms;
    std::vector<ref::Verification> want;
};

std::vector<float> softmax(const std::vector<double>& logits) {
    double max = -std::numeric_limits<double>::infinity(), sum = 0.0;
    for (double l : logits) max = std::max(max, l);
    std::vector<double> e(logits.size());
    for (std::size_t i = 0; i < e.size(); ++i) sum += e[i] = std::exp(logits[i] - max);
    std::vector<float> p(e.size());
    for (std::size_t i = 0; i < e.size(); ++i) p[i] = static_cast<float>(e[i] / sum);
    return p;
}

// One target row and its draft row (the draft row unused at position gamma).
void make_rows(std::size_t vocab, Rows kind, course::Rng& rng, std::vector<float>& p_row,
               std::vector<float>& q_row) {
    constexpr double kNone = -std::numeric_limits<double>::infinity();
    std::vector<double> target(vocab), draft(vocab);
    for (std::size_t i = 0; i < vocab; ++i) target[i] = rng.uniform(-4.0f, 4.0f);
    if (kind == Rows::peaked)
        for (int k = 0; k < 32; ++k)
            target[rng.uniform_int(0, std::int64_t(vocab) - 1)] = rng.uniform(10.0f, 14.0f);
    for (std::size_t i = 0; i < vocab; ++i) draft[i] = target[i] + rng.uniform(-1.5f, 1.5f);
    if (kind == Rows::disjoint)
        for (std::size_t i = 0; i < vocab; ++i) (i % 2 ? draft[i] : target[i]) = kNone;
    if (kind == Rows::sparse) {
        std::vector<double> kept(vocab, kNone);
        for (int k = 0; k < 10; ++k) {
            const auto i = rng.uniform_int(0, std::int64_t(vocab) - 1);
            kept[i] = target[i];
        }
        target = kept;
    }
    p_row = softmax(target);
    q_row = kind == Rows::equal ? p_row : softmax(draft);
}

// A token drawn from a distribution by inverse transform (the draft model's draw).
int draw_from(const std::vector<float>& row, course::Rng& rng) {
    std::vector<double> p(row.begin(), row.end());
    return ref::draw(p, rng.uniform01());
}

// A uniform at least kMargin away from `boundary` (and from 0 and 1).
float uniform_away_from(double boundary, course::Rng& rng) {
    for (;;) {
        const float u = rng.uniform(0.0f, 1.0f);
        if (std::fabs(u - boundary) >= kMargin && u >= kMargin && u <= 1.0 - kMargin) return u;
    }
}

// One sequence's rows, drafts and uniforms, redrawn until every uniform lies away from its
// boundaries and a rejection leaves a residual of mass kMinResidualMass or more.
void add_sequence(const Case& c, Inputs& in, course::Rng& rng) {
    const std::size_t V = c.vocab, gamma = c.gamma;
    for (int attempt = 0;; ++attempt) {
        ASSERT_LT(attempt, 200) << "no sequence with its uniforms away from the boundaries";
        std::vector<float> p, q, p_row, q_row, uniforms;
        std::vector<int> drafts;
        for (std::size_t i = 0; i <= gamma; ++i) {
            make_rows(V, c.rows, rng, p_row, q_row);
            p.insert(p.end(), p_row.begin(), p_row.end());
            if (i == gamma) break;
            q.insert(q.end(), q_row.begin(), q_row.end());
            const int t = draw_from(q_row, rng);
            drafts.push_back(t);
            uniforms.push_back(
                uniform_away_from(std::min(1.0, double(p_row[t]) / double(q_row[t])), rng));
        }
        const std::size_t n =
            ref::speculative_accepted(p.data(), q.data(), drafts.data(), uniforms.data(), gamma, V);
        const float* q_n = n < gamma ? &q[n * V] : nullptr;
        const auto weights = ref::residual_weights(&p[n * V], q_n, V);
        double mass = 0.0;
        for (double w : weights) mass += w;
        if (mass < kMinResidualMass) continue;
        const auto r = ref::residual_distribution(&p[n * V], q_n, V);
        float u = 0.0f;
        for (int tries = 0; tries < 1000 && ref::draw_margin(r, u) < kMargin; ++tries)
            u = rng.uniform(0.0f, 1.0f);
        if (ref::draw_margin(r, u) < kMargin) continue;
        in.p.insert(in.p.end(), p.begin(), p.end());
        in.q.insert(in.q.end(), q.begin(), q.end());
        in.drafts.insert(in.drafts.end(), drafts.begin(), drafts.end());
        in.uniforms.insert(in.uniforms.end(), uniforms.begin(), uniforms.end());
        in.residual_uniforms.push_back(u);
        in.want.push_back(ref::speculative_verify(p.data(), q.data(), drafts.data(),
                                                  uniforms.data(), u, gamma, V));
        return;
    }
}

// The device's inputs. q is followed by `batch` rows of NaN: a kernel that reads q with p's row
// stride (b * (gamma + 1) + i) reaches at most that far, and the NaN makes it reject.
struct DeviceInputs {
    course::DeviceBuffer<float> p, q, uniforms, residual_uniforms;
    course::DeviceBuffer<int> drafts;
    DeviceInputs(const Inputs& in, std::size_t batch, std::size_t vocab)
        : p("p", in.p),
          q("q", padded(in.q, batch * vocab)),
          uniforms("uniforms", in.uniforms),
          residual_uniforms("residual_uniforms", in.residual_uniforms),
          drafts("draft_tokens", in.drafts) {}
    static std::vector<float> padded(std::vector<float> q, std::size_t tail) {
        q.resize(q.size() + tail, std::numeric_limits<float>::quiet_NaN());
        return q;
    }
};

// ---- The known mistakes ----

// The number accepted when q's rows are read with p's stride (NaN past q's end rejects).
int accepted_with_p_stride(const Inputs& in, const Case& c, std::size_t b) {
    const std::size_t V = c.vocab, rows = c.batch * c.gamma;
    for (std::size_t i = 0; i < c.gamma; ++i) {
        const std::size_t row = b * (c.gamma + 1) + i;
        const int t = in.drafts[b * c.gamma + i];
        const double q = row < rows ? in.q[row * V + t] : std::nan("");
        if (!(in.uniforms[b * c.gamma + i] * q < in.p[(b * (c.gamma + 1) + i) * V + t]))
            return static_cast<int>(i);
    }
    return static_cast<int>(c.gamma);
}

// The token drawn at position n by a kernel that reads q with p's row stride: the residual with
// q's row b * (gamma + 1) + n (past q's rows, NaN: no weight, nothing drawn, -1).
int draw_with_p_stride(const Inputs& in, const Case& c, std::size_t b, std::size_t n) {
    const std::size_t V = c.vocab, row = b * (c.gamma + 1) + n;
    const float* target = &in.p[row * V];
    if (row >= c.batch * c.gamma) return -1;
    const auto w = ref::residual_weights(target, &in.q[row * V], V);
    double mass = 0.0;
    for (double v : w) mass += v;
    return mass > 0.0 ? ref::draw(ref::residual_distribution(target, &in.q[row * V], V),
                                  in.residual_uniforms[b])
                      : -1;
}

// The token drawn after a rejection by a kernel that forgets to renormalize the residual: the
// first whose cumulative max(0, p - q) exceeds u itself; -1 when the residual's mass is below u
// (nothing is drawn).
int draw_not_renormalized(const float* p, const float* q, std::size_t vocab, double u) {
    const auto w = ref::residual_weights(p, q, vocab);
    double cumulative = 0.0;
    for (std::size_t i = 0; i < vocab; ++i)
        if (w[i] > 0.0 && (cumulative += w[i]) > u) return static_cast<int>(i);
    return -1;
}

std::string diagnose(const Inputs& in, const Case& c, const std::vector<int>& got_accepted,
                     const std::vector<int>& got_tokens) {
    const std::size_t V = c.vocab, G = c.gamma;
    // Whether a mistake explains every sequence (`predict` gives its accepted count or token,
    // `want` the right one), and changes at least one.
    const auto explains = [&](const std::function<int(std::size_t)>& got,
                              const std::function<int(std::size_t)>& predict,
                              const std::function<int(std::size_t)>& want) {
        bool changes = false;
        for (std::size_t b = 0; b < c.batch; ++b) {
            const int predicted = predict(b);
            changes |= predicted != want(b);
            // A prediction of "nothing drawn" (-1) matches a token never written.
            if (predicted == -1 ? !course::is_poison(got(b)) : got(b) != predicted) return false;
        }
        return changes;
    };
    const auto n = [&](std::size_t b) { return in.want[b].accepted; };
    if (explains([&](std::size_t b) { return got_accepted[b]; },
                 [&](std::size_t b) { return accepted_with_p_stride(in, c, b); }, n))
        return "the accepted counts are those of q read at p's rows: p has gamma + 1 rows per "
               "sequence (row b * (gamma + 1) + i), q has gamma (row b * gamma + i)";
    for (std::size_t b = 0; b < c.batch; ++b)
        if (got_accepted[b] != n(b)) return "";
    // The accepted counts are right: the draws. After a rejection, the residual's rows.
    const auto drawn = [&](std::size_t b) { return got_tokens[b * (G + 1) + n(b)]; };
    const auto want = [&](std::size_t b) { return in.want[b].tokens[n(b)]; };
    const auto target = [&](std::size_t b) { return &in.p[(b * (G + 1) + n(b)) * V]; };
    const auto draft = [&](std::size_t b) {
        return std::size_t(n(b)) < G ? &in.q[(b * G + n(b)) * V] : nullptr;
    };
    // Which draws are wrong: the bonus tokens' alone (drawn, from the wrong row), none found, all
    // on one side of the right ones.
    int bonus_wrong = -1;
    bool residual_wrong = false, none_only = true, all_later = true, all_earlier = true;
    for (std::size_t b = 0; b < c.batch; ++b) {
        if (drawn(b) == want(b)) continue;
        if (draft(b))
            residual_wrong = true;
        else if (bonus_wrong < 0)
            bonus_wrong = static_cast<int>(b);
        const bool none = course::is_poison(drawn(b));
        none_only &= none;
        all_later &= none || drawn(b) > want(b);
        all_earlier &= !none && drawn(b) < want(b);
    }
    if (!residual_wrong && bonus_wrong < 0) return "";
    if (!residual_wrong && !none_only)
        return "sequence " + std::to_string(bonus_wrong) +
               " accepted all gamma drafts, and its bonus token (position gamma) is wrong: "
               "it is drawn from p[b][gamma] with residual_uniforms[b]";
    if (none_only)
        return "every wrong draw finds no token, its goal past the prefix sums: the residual NOT "
               "renormalized (a goal of u, not u times its mass), q read at p's rows (this q ends "
               "in NaN rows), or the prefix sums miss mass before the token (the chunks before "
               "the one scanned?)";
    const bool not_renormalized = explains(
        drawn,
        [&](std::size_t b) {
            return draft(b) ? draw_not_renormalized(target(b), draft(b), V, in.residual_uniforms[b])
                            : want(b);
        },
        want);
    if (not_renormalized)
        return "after a rejection the tokens are those of max(0, p - q) NOT renormalized: its "
               "mass is below 1, so draw with u times the mass (or divide the weights by it)";
    // q at p's rows, with counts that came out right by chance: the draws read the wrong rows.
    if (explains(
            drawn,
            [&](std::size_t b) { return draft(b) ? draw_with_p_stride(in, c, b, n(b)) : want(b); },
            want))
        return "the accepted counts are right, but the draws are those of q read at p's rows: p "
               "has gamma + 1 rows per sequence (row b * (gamma + 1) + i), q has gamma (row b * "
               "gamma + i)";
    if (explains(
            drawn,
            [&](std::size_t b) {
                return ref::draw(ref::residual_distribution(target(b), nullptr, V),
                                 in.residual_uniforms[b]);
            },
            want))
        return "after a rejection the token is drawn from p: the residual is max(0, p - q), "
               "renormalized (p would count the tokens the draft proposes twice)";
    if (all_later)
        return "every wrong draw lands after the right token, or finds none: the prefix sums "
               "miss mass before the token (the chunks before the one scanned?)";
    if (all_earlier)
        return "every wrong draw lands before the right token: the total misses mass at the end "
               "of the row (the last, partial chunk?), so u times it falls short";
    return "";
}

// ---- Fixed draws against the reference ----

void check_case(const Case& c, course::Rng& rng) {
    SCOPED_TRACE(c.describe());
    Inputs in;
    for (std::size_t b = 0; b < c.batch; ++b) {
        add_sequence(c, in, rng);
        if (testing::Test::HasFatalFailure()) return;
    }
    DeviceInputs d(in, c.batch, c.vocab);
    course::DeviceBuffer<int> out_tokens("out_tokens", c.batch * (c.gamma + 1));
    course::DeviceBuffer<int> accepted("accepted", c.batch);
    speculative_verify(d.p.data(), d.q.data(), d.drafts.data(), d.uniforms.data(),
                       d.residual_uniforms.data(), out_tokens.data(), accepted.data(),
                       static_cast<int>(c.batch), static_cast<int>(c.gamma),
                       static_cast<int>(c.vocab));
    const auto got_accepted = accepted.download();
    const auto got_tokens = out_tokens.download();

    std::vector<int> want_accepted, want_tokens;
    for (const auto& w : in.want) {
        want_accepted.push_back(w.accepted);
        want_tokens.insert(want_tokens.end(), w.tokens.begin(), w.tokens.end());
    }
    const auto why = [&] { return diagnose(in, c, got_accepted, got_tokens); };
    course::CompareOptions accepted_options{"accepted (index = sequence)"};
    accepted_options.diagnose = why;
    const auto accepted_right = course::expect_equal(got_accepted, want_accepted, accepted_options);
    EXPECT_TRUE(accepted_right);
    if (!accepted_right) return;  // the tokens follow from the counts
    course::CompareOptions token_options{"out_tokens"};
    token_options.matrix = course::Matrix{c.batch, c.gamma + 1};
    token_options.diagnose = why;
    EXPECT_TRUE(course::expect_equal(got_tokens, want_tokens, token_options));
}

class SpeculativeVerify : public course::GpuTest {};

// Drafts near the target: some accepted, a rejection, a residual draw. Several sequences first,
// so that a sequence finding the wrong rows shows in the first case.
TEST_F(SpeculativeVerify, Spread) {
    auto rng = test_rng();
    check_case({4, 3, 1000}, rng);
    check_case({9, 4, 33}, rng);
    check_case({9, 1, 2}, rng);
    check_case({5, 2, 1}, rng);  // one token: accepted always (p = q = 1), the bonus token 0
    check_case({7, 16, 100}, rng);
}

// All accepted (the bonus token), all rejected (the residual is p), a target of 10 tokens.
TEST_F(SpeculativeVerify, EqualDisjointSparse) {
    auto rng = test_rng();
    check_case({5, 4, 300, Rows::equal}, rng);
    check_case({5, 4, 300, Rows::disjoint}, rng);
    check_case({9, 3, 1000, Rows::sparse}, rng);
}

// The contract's limits: 256 sequences, vocabularies of GPT-2, Llama 3 and 2^18.
TEST_F(SpeculativeVerify, Limits) {
    auto rng = test_rng();
    check_case({256, 2, 64}, rng);
    check_case({3, 4, 50304, Rows::peaked}, rng);
    check_case({2, 8, 128256, Rows::peaked}, rng);
    check_case({1, 1, 262144, Rows::peaked}, rng);
}

// ---- The distribution ----

// `sequences` copies of one target and draft (gamma 2), the drafts drawn from q, all uniforms
// random. The first token must follow p_0, the second (where the first was accepted) p_1, and
// the first must be accepted with probability beta = sum min(p_0, q_0).
void check_distribution(std::size_t vocab, std::size_t sequences, course::Rng& rng) {
    constexpr std::size_t G = 2;
    // The draft's rows from logits of their own: about half the drafts rejected, so that the
    // residual's draws weigh in the counts.
    std::vector<float> p_rows, q_rows, p_row, q_row, unused;
    for (std::size_t i = 0; i <= G; ++i) {
        make_rows(vocab, Rows::spread, rng, p_row, unused);
        p_rows.insert(p_rows.end(), p_row.begin(), p_row.end());
        make_rows(vocab, Rows::spread, rng, unused, q_row);
        if (i < G) q_rows.insert(q_rows.end(), q_row.begin(), q_row.end());
    }
    Inputs in;
    for (std::size_t b = 0; b < sequences; ++b) {
        in.p.insert(in.p.end(), p_rows.begin(), p_rows.end());
        in.q.insert(in.q.end(), q_rows.begin(), q_rows.end());
        for (std::size_t i = 0; i < G; ++i) {
            in.drafts.push_back(draw_from(
                std::vector<float>(q_rows.begin() + i * vocab, q_rows.begin() + (i + 1) * vocab),
                rng));
            in.uniforms.push_back(rng.uniform(0.0f, 1.0f));
        }
        in.residual_uniforms.push_back(rng.uniform(0.0f, 1.0f));
    }
    DeviceInputs d(in, sequences, vocab);
    course::DeviceBuffer<int> out_tokens("out_tokens", sequences * (G + 1));
    course::DeviceBuffer<int> accepted("accepted", sequences);
    speculative_verify(d.p.data(), d.q.data(), d.drafts.data(), d.uniforms.data(),
                       d.residual_uniforms.data(), out_tokens.data(), accepted.data(),
                       static_cast<int>(sequences), static_cast<int>(G), static_cast<int>(vocab));
    const auto got = out_tokens.download();
    const auto got_accepted = accepted.download();

    std::vector<std::size_t> first(vocab, 0), second(vocab, 0);
    std::size_t accepted_first = 0;
    for (std::size_t b = 0; b < sequences; ++b) {
        for (std::size_t i = 0; i < 2; ++i) {
            if (i == 1 && got_accepted[b] < 1) break;
            const int token = got[b * (G + 1) + i];
            ASSERT_TRUE(token >= 0 && std::size_t(token) < vocab)
                << "sequence " << b << ", position " << i
                << ": a token outside [0, vocab): " << token
                << " (a draw that found no token: is the residual renormalized?)";
            ASSERT_GT(p_rows[i * vocab + token], 0.0f)
                << "sequence " << b << " emitted token " << token << " at position " << i
                << ", whose target probability is 0";
            ++(i == 0 ? first : second)[token];
        }
        accepted_first += got_accepted[b] >= 1;
    }
    const auto test = [&](const std::vector<std::size_t>& counts, std::size_t i, std::size_t n,
                          const char* what) {
        const std::vector<double> p(p_rows.begin() + i * vocab, p_rows.begin() + (i + 1) * vocab);
        const auto result = ref::chi_square(counts, p, n);
        std::printf(
            "[distribution] %s: %zu draws over %d bins: chi-square %.1f (%d degrees of freedom; "
            "fails above %.1f)\n",
            what, n, result.bins, result.statistic, result.bins - 1, result.critical);
        EXPECT_LE(result.statistic, result.critical)
            << what << ": the tokens are not distributed as the target's p_" << i << " (chi-square "
            << result.statistic << "; a correct verification exceeds " << result.critical
            << " once in a million runs). Speculative decoding must leave the target's "
               "distribution unchanged: accept with probability min(1, p/q), else draw from "
               "max(0, p - q) renormalized (notes/10_inference.md, section 5)";
    };
    test(first, 0, sequences, "the first token");
    test(second, 1, accepted_first, "the second token, where the first was accepted");

    double beta = 0.0;
    for (std::size_t t = 0; t < vocab; ++t) beta += std::min(p_rows[t], q_rows[t]);
    const double n = static_cast<double>(sequences);
    const double z = (accepted_first - n * beta) / std::sqrt(n * beta * (1.0 - beta));
    std::printf(
        "[distribution] the first draft accepted %zu times in %zu: %.4f, expected %.4f "
        "(z %.2f; fails beyond 5)\n",
        accepted_first, sequences, accepted_first / n, beta, z);
    EXPECT_LE(std::fabs(z), 5.0) << "the first draft token is accepted " << accepted_first / n
                                 << " of the time, not beta = sum min(p, q) = " << beta
                                 << ": accept when u < p(t) / q(t)";
}

TEST_F(SpeculativeVerify, Distribution) {
    COURSE_SKIP_ON_EMULATOR("65536 sequences");
    auto rng = test_rng();
    check_distribution(40, 65536, rng);
}

// 2048 sequences, which the emulator runs too: the same test, with less power.
TEST_F(SpeculativeVerify, DistributionSmall) {
    auto rng = test_rng();
    check_distribution(12, 2048, rng);
}

// ---- Timed cases ----

void time_against_copy(const Case& c, course::Rng rng) {
    COURSE_SKIP_ON_EMULATOR("a timed case");
    const std::size_t V = c.vocab, G = c.gamma;
    COURSE_REQUIRE_MEMORY(4 * c.batch * (2 * G + 2) * V + (256u << 20));
    SCOPED_TRACE(c.describe());
    Inputs in;
    for (std::size_t b = 0; b < c.batch; ++b) {
        add_sequence(c, in, rng);
        if (testing::Test::HasFatalFailure()) return;
    }
    DeviceInputs d(in, c.batch, V);
    course::DeviceBuffer<int> out_tokens("out_tokens", c.batch * (G + 1));
    course::DeviceBuffer<int> accepted("accepted", c.batch);
    // The rows a verification must read: the target's and the draft's at the first rejection,
    // or the target's last one (the gamma tested probabilities are noise beside them).
    std::size_t rows = 0;
    for (const auto& w : in.want) rows += std::size_t(w.accepted) < G ? 2 : 1;
    const std::size_t bytes = 4 * rows * V;
    ASSERT_EQ(V % 2, 0u) << "the second input set drafts index XOR 1: an even vocabulary keeps it "
                            "below V";
    course::DeviceBuffer<float> from("copy_from", rows * V), to("copy_to", rows * V);

    const auto timing = course::time_against(
        [&] {
            speculative_verify(d.p.data(), d.q.data(), d.drafts.data(), d.uniforms.data(),
                               d.residual_uniforms.data(), out_tokens.data(), accepted.data(),
                               int(c.batch), int(G), int(V));
        },
        [&] { course::baseline::device_copy(to.data(), from.data(), bytes); },
        {course::TimedOutput(out_tokens), course::TimedOutput(accepted)},
        // The second input set drafts each token's neighbour (its index XOR 1: still below the
        // even vocabularies of these cases), which the draft model gave another probability.
        {course::TimedInput(d.drafts, 1)});

    std::vector<int> want_accepted, want_tokens;
    for (const auto& w : in.want) {
        want_accepted.push_back(w.accepted);
        want_tokens.insert(want_tokens.end(), w.tokens.begin(), w.tokens.end());
    }
    ASSERT_TRUE(course::expect_equal(accepted.download(), want_accepted,
                                     course::CompareOptions{"accepted (index = sequence)"}));
    ASSERT_TRUE(course::expect_equal(out_tokens.download(), want_tokens,
                                     course::CompareOptions{"out_tokens"}));
    const std::string label =
        std::to_string(c.batch) + "x" + std::to_string(V) + " gamma " + std::to_string(G);
    course::record_bandwidth(label, timing, static_cast<double>(bytes), "copy", 2.0 * bytes);
}

// Llama 3's vocabulary, 64 sequences of 4 drafts; GPT-2's, 16 sequences of 8.
TEST_F(SpeculativeVerify, Bandwidth64x128256) {
    time_against_copy({64, 4, 128256, Rows::peaked}, test_rng());
}
TEST_F(SpeculativeVerify, Bandwidth16x50304) {
    time_against_copy({16, 8, 50304, Rows::peaked}, test_rng());
}

}  // namespace
