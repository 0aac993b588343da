// The reference's generation ops (ops_generation.cu) on their own: a new token's embedding at each
// sequence's position; the cache written at its positions (read from the lengths on the device)
// and nowhere else; decode attention against a softmax in double, on lengths that leave
// chunks of the split empty, with every position past a length NaN (a read there shows), the
// workspace NaN on entry, and scores large enough that a merge without rescaling overflows; the
// sampler against the host's rule (sampling.h), never drawing a padding column, wherever the draw
// is not within their rounding of a boundary. Part of trainer_tests on a GPU (skipped without
// one), and run on the CPU emulator in CI (dev/emu: trainer.generation_ops.emulated, whose
// expf is the host's, so there the sampler meets its fixed-point twin draw for draw too).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "course/check.h"
#include "kv_cache.h"
#include "ops.h"
#include "ops_generation.h"
#include "sampling.h"
#include "sampling_margins.h"

namespace trainer {
namespace {

// Any GPU runs these ops in every type: bf16 and fp16 are only loaded, converted and stored.
bool gpu_here() {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}
#define SKIP_WITHOUT_GPU() \
    if (!gpu_here()) GTEST_SKIP() << "no CUDA GPU"

// Device memory of n T, freed at the end of the scope.
template <typename T>
struct Device {
    T* data = nullptr;
    std::size_t n;
    explicit Device(std::size_t count) : n(count) { CUDA_CHECK(cudaMalloc(&data, n * sizeof(T))); }
    Device(const Device&) = delete;
    ~Device() { cudaFree(data); }
    void upload(const std::vector<T>& host) {
        CUDA_CHECK(cudaMemcpy(data, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    }
    std::vector<T> download() const {
        std::vector<T> host(n);
        CUDA_CHECK(cudaMemcpy(host.data(), data, n * sizeof(T), cudaMemcpyDeviceToHost));
        return host;
    }
};

// Values as the GPU stores them, and back (round to nearest, ties to even).
float value(float x) { return x; }
float value(bf16 x) { return __bfloat162float(x); }
float value(fp16 x) { return __half2float(x); }
template <typename Act>
std::vector<Act> stored(const std::vector<float>& values) {
    std::vector<Act> out(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
        if constexpr (std::is_same_v<Act, float>) out[i] = values[i];
        if constexpr (std::is_same_v<Act, bf16>) out[i] = __float2bfloat16(values[i]);
        if constexpr (std::is_same_v<Act, fp16>) out[i] = __float2half(values[i]);
    }
    return out;
}

// ---- A new token's embedding ----

// Each sequence's token at the position before its length (sequences at different positions),
// as the reference's embedding_forward computes a token at that position.
template <typename Act>
void decode_embedding_reads_each_sequences_position() {
    const int B = 3, C = 40, V = 11, positions = 9;
    const std::vector<int> tokens = {4, 0, 10}, lengths = {1, 9, 5};
    std::mt19937 random(3);
    std::normal_distribution<float> normal;
    std::vector<float> wte(static_cast<std::size_t>(V) * C),
        wpe(static_cast<std::size_t>(positions) * C);
    for (float& x : wte) x = normal(random);
    for (float& x : wpe) x = normal(random);
    const std::vector<Act> wte_s = stored<Act>(wte), wpe_s = stored<Act>(wpe);
    Device<Act> out(static_cast<std::size_t>(B) * C), wte_d(wte_s.size()), wpe_d(wpe_s.size());
    Device<int> tokens_d(B), lengths_d(B);
    wte_d.upload(wte_s);
    wpe_d.upload(wpe_s);
    tokens_d.upload(tokens);
    lengths_d.upload(lengths);
    out.upload(stored<Act>(std::vector<float>(out.n, NAN)));
    decode_embedding_reference<Act>(out.data, tokens_d.data, wte_d.data, wpe_d.data, lengths_d.data,
                                    B, C);
    const std::vector<Act> got = out.download();
    for (int b = 0; b < B; ++b)
        for (int c = 0; c < C; ++c) {
            const float want = value(stored<Act>(
                {value(wte_s[tokens[b] * C + c]) + value(wpe_s[(lengths[b] - 1) * C + c])})[0]);
            ASSERT_EQ(value(got[b * C + c]), want)
                << "sequence " << b << ", channel " << c << ": not wte[" << tokens[b] << "] + wpe["
                << lengths[b] - 1 << "]";
        }
}

TEST(GenerationOps, DecodeEmbeddingReadsEachSequencesPosition) {
    SKIP_WITHOUT_GPU();
    decode_embedding_reads_each_sequences_position<float>();
    decode_embedding_reads_each_sequences_position<bf16>();
}

// ---- The cache written ----

// T tokens of each sequence at its last T positions: the lengths (on the device) differ from one
// sequence to the next, and a length past the capacity writes nothing of its positions outside.
template <typename Act>
void cache_write_writes_its_positions_only() {
    const int B = 3, T = 5, C = 64, NH = 4, HS = C / NH, capacity = 12;
    const std::vector<int> lengths = {8, 12, 14};  // the last: positions 9 .. 13, two outside
    std::mt19937 random(1);
    std::normal_distribution<float> normal;
    std::vector<float> qkv(static_cast<std::size_t>(B) * T * 3 * C);
    for (float& x : qkv) x = normal(random);
    const std::vector<Act> qkv_stored = stored<Act>(qkv);
    const std::size_t elements = kv::layer_elements(B, NH, capacity, HS);
    // The caches of B + 1 sequences: the one past the last must stay untouched.
    const std::size_t room = kv::layer_elements(B + 1, NH, capacity, HS);
    Device<Act> q(qkv.size()), k(room), v(room);
    Device<int> lengths_d(B);
    q.upload(qkv_stored);
    k.upload(stored<Act>(std::vector<float>(room, NAN)));
    v.upload(stored<Act>(std::vector<float>(room, NAN)));
    lengths_d.upload(lengths);
    kv_cache_write_reference<Act>(k.data, v.data, q.data, lengths_d.data, B, T, C, NH, capacity);
    const std::vector<Act> keys = k.download(), values = v.download();
    for (std::size_t at = elements; at < room; ++at)
        ASSERT_TRUE(std::isnan(value(keys[at])) && std::isnan(value(values[at])))
            << "wrote past the last sequence's cache";
    for (int b = 0; b < B; ++b) {
        const int start = lengths[b] - T;
        for (int h = 0; h < NH; ++h)
            for (int p = 0; p < capacity; ++p)
                for (int d = 0; d < HS; ++d) {
                    const std::size_t at = kv::offset(b, h, p, d, NH, capacity, HS);
                    SCOPED_TRACE("sequence " + std::to_string(b) + ", head " + std::to_string(h) +
                                 ", position " + std::to_string(p) + ", element " +
                                 std::to_string(d));
                    if (p < start || p >= start + T) {
                        ASSERT_TRUE(std::isnan(value(keys[at])) && std::isnan(value(values[at])))
                            << "written outside positions " << start << " .. " << start + T - 1;
                        continue;
                    }
                    const std::size_t row = (static_cast<std::size_t>(b) * T + p - start) * 3 * C;
                    ASSERT_EQ(value(keys[at]), value(qkv_stored[row + C + h * HS + d]))
                        << "the key is not qkv's k of that token";
                    ASSERT_EQ(value(values[at]), value(qkv_stored[row + 2 * C + h * HS + d]))
                        << "the value is not qkv's v of that token";
                }
    }
}

TEST(GenerationOps, CacheWriteWritesItsPositionsOnly) {
    SKIP_WITHOUT_GPU();
    cache_write_writes_its_positions_only<float>();
    cache_write_writes_its_positions_only<bf16>();
}

// ---- Decode attention ----

// One decode attention of 8 sequences of the lengths below (capacity 1100, 3 heads: 11 chunks
// of 100 positions per head) against a softmax in double of the same stored values; `spread`
// scales the queries (scores of that spread).
template <typename Act>
void decode_attention_matches_a_softmax(int HS, float spread) {
    const std::vector<int> lengths = {1, 2, 63, 64, 65, 257, 1000, 1100};
    const int B = static_cast<int>(lengths.size()), NH = 3, C = NH * HS, capacity = 1100;
    std::mt19937 random(HS);
    std::normal_distribution<float> normal;
    std::vector<float> qkv(static_cast<std::size_t>(B) * 3 * C);
    for (float& x : qkv) x = spread * normal(random);
    const std::size_t elements = kv::layer_elements(B, NH, capacity, HS);
    std::vector<float> keys(elements, NAN), values(elements, NAN);  // NaN past every length
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
            for (int p = 0; p < lengths[b]; ++p)
                for (int d = 0; d < HS; ++d) {
                    keys[kv::offset(b, h, p, d, NH, capacity, HS)] = normal(random);
                    values[kv::offset(b, h, p, d, NH, capacity, HS)] = normal(random);
                }
    const std::vector<Act> qkv_s = stored<Act>(qkv), keys_s = stored<Act>(keys),
                           values_s = stored<Act>(values);
    Device<Act> q(qkv.size()), k(elements), v(elements), out(static_cast<std::size_t>(B) * C);
    Device<int> lens(B);
    Device<float> workspace(decode_workspace_floats(B, NH, HS));
    q.upload(qkv_s);
    k.upload(keys_s);
    v.upload(values_s);
    lens.upload(lengths);
    workspace.upload(std::vector<float>(workspace.n, NAN));  // its contents on entry: anything
    decode_attention_reference<Act>(out.data, workspace.data, q.data, k.data, v.data, lens.data, B,
                                    C, NH, capacity);
    const std::vector<Act> got = out.download();
    // Float sums over up to 1100 keys, then one rounding of the result to Act.
    const double rounding = std::is_same_v<Act, float>  ? 0.0
                            : std::is_same_v<Act, bf16> ? 0x1p-8
                                                        : 0x1p-11;
    const double scale = attention_scale(HS);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            std::vector<double> s(lengths[b]);
            double max = -INFINITY;
            for (int p = 0; p < lengths[b]; ++p) {
                double dot = 0.0;
                for (int d = 0; d < HS; ++d)
                    dot += value(qkv_s[static_cast<std::size_t>(b) * 3 * C + h * HS + d]) *
                           static_cast<double>(
                               value(keys_s[kv::offset(b, h, p, d, NH, capacity, HS)]));
                s[p] = scale * dot;
                max = std::max(max, s[p]);
            }
            double sum = 0.0;
            for (double& x : s) sum += x = std::exp(x - max);
            for (int d = 0; d < HS; ++d) {
                double want = 0.0;
                for (int p = 0; p < lengths[b]; ++p)
                    want += s[p] * value(values_s[kv::offset(b, h, p, d, NH, capacity, HS)]);
                want /= sum;
                const double have = value(got[static_cast<std::size_t>(b) * C + h * HS + d]);
                ASSERT_NEAR(have, want, 2e-5 + rounding * std::fabs(want))
                    << kDtypeName<Act> << ", sequence " << b << " (length " << lengths[b]
                    << "), head " << h << ", element " << d << "; heads of " << HS
                    << ", scores of spread " << spread;
            }
        }
}

TEST(GenerationOps, DecodeAttentionMatchesASoftmax) {
    SKIP_WITHOUT_GPU();
    for (float spread : {1.0f, 30.0f}) {
        for (int HS : {16, 64}) decode_attention_matches_a_softmax<float>(HS, spread);
        for (int HS : {16, 64, 128}) decode_attention_matches_a_softmax<bf16>(HS, spread);
    }
    decode_attention_matches_a_softmax<fp16>(64, 1.0f);
}

TEST(GenerationOps, DecodeAttentionRefusesHeadsItCannotSplitIntoLanes) {
    SKIP_WITHOUT_GPU();
    // 48 bf16 values are 6 loads of 16 bytes: not a power of two of lanes.
    EXPECT_THROW(decode_attention_reference<bf16>(nullptr, nullptr, nullptr, nullptr, nullptr,
                                                  nullptr, 1, 96, 2, 64),
                 std::invalid_argument);
}

// ---- Sampling ----

// The sampler on `rows` rows of V logits stored as Act (bf16's ties among them), the padding
// columns up to Vp holding a logit above every real one (a sampler that reads them draws them),
// against the host's rule on the same values.
template <typename Act>
void sampler_draws_as_the_host_rule(int V, int rows, int draws) {
    const int Vp = (V + 127) / 128 * 128;  // as the model pads its vocabulary
    std::mt19937 random(V);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> logits(static_cast<std::size_t>(rows) * Vp, 1000.0f);
    for (int r = 0; r < rows; ++r)
        for (int i = 0; i < V; ++i) logits[static_cast<std::size_t>(r) * Vp + i] = normal(random);
    const std::vector<Act> logits_s = stored<Act>(logits);
    Device<Act> device_logits(logits_s.size());
    Device<float> device_uniforms(rows);
    Device<int> device_tokens(rows);
    device_logits.upload(logits_s);
    const SamplingParams settings[] = {{1.0f, 40, 1.0f}, {0.8f, 0, 0.9f},  {1.3f, 1, 1.0f},
                                       {1.0f, 0, 1.0f},  {1.0f, 40, 0.5f}, {0.7f, 5, 0.3f}};
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    int compared = 0, left_out = 0;
    for (const SamplingParams& params : settings)
        for (int draw = 0; draw < draws; ++draw) {
            std::vector<float> u(rows);
            for (float& x : u) x = uniform(random);
            device_uniforms.upload(u);
            sample_reference<Act>(device_tokens.data, device_logits.data, device_uniforms.data,
                                  rows, V, Vp, params.temperature, params.top_k, params.top_p);
            const std::vector<int> tokens = device_tokens.download();
            for (int r = 0; r < rows; ++r) {
                std::vector<float> row(V);
                for (int i = 0; i < V; ++i)
                    row[i] = value(logits_s[static_cast<std::size_t>(r) * Vp + i]);
                SCOPED_TRACE(std::string(kDtypeName<Act>) + ", V " + std::to_string(V) + ", row " +
                             std::to_string(r) + ", temperature " +
                             std::to_string(params.temperature) + ", top_k " +
                             std::to_string(params.top_k) + ", top_p " +
                             std::to_string(params.top_p) + ", u " + std::to_string(u[r]));
                ASSERT_GE(tokens[r], 0);
                ASSERT_LT(tokens[r], V) << "drew a padding column";
#ifdef COURSE_EMULATOR  // the emulated GPU's expf is the host's: the twin's arithmetic exactly
                ASSERT_EQ(tokens[r], sample_token_fixed_point(row.data(), V, params, u[r]));
#endif
                if (testing::could_draw_otherwise(
                        testing::sampling_margins(row.data(), V, params, u[r]), 0.0,
                        params.temperature, testing::kSamplingRounding)) {
                    ++left_out;
                    continue;
                }
                ++compared;
                ASSERT_EQ(tokens[r], sample_token(row.data(), V, params, u[r]));
            }
        }
    EXPECT_GT(compared, 10 * left_out) << "too many draws near a boundary to say much";
}

TEST(GenerationOps, SamplerDrawsAsTheHostRule) {
    SKIP_WITHOUT_GPU();
    sampler_draws_as_the_host_rule<float>(67, 8, 3);
    sampler_draws_as_the_host_rule<bf16>(67, 8, 3);
    sampler_draws_as_the_host_rule<float>(50257, 2, 1);
    sampler_draws_as_the_host_rule<bf16>(50257, 2, 1);
}

}  // namespace
}  // namespace trainer
