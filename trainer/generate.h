// Generation: B sequences continued from a prompt, a token at a time, with the KV cache (a prefill,
// then a decoding step per token) or without it (a whole forward pass per token); train_gpt's
// --generate, its samples and --generate-bench, and the tests.
//
// The context slides once full: the next token is predicted from the last `context` tokens, at
// positions 0 .. context - 1. Positions are absolute in GPT-2 (a learned embedding per position),
// so a sliding window moves every cached key to another position: past the context, the cache is
// filled again from the window at every token (a forward pass over it, as without the cache), so
// that both ways predict from the same window.
//
// Random numbers: one UniformStream (sampling.h) from the seed, B numbers per token, sequence 0
// first. Without the cache the host draws with sample_token; with it the GPU draws with the table's
// sample op, the same rule: the same seed draws the same tokens both ways, unless the two ways'
// logits, which differ in their last bits, move a boundary of the cumulative probabilities across
// a uniform (trainer/README.md, "Generation with a KV cache"). With the cache, each decoding step
// runs as a CUDA graph (cuda_graph; Gpt::decode), the same kernels on the same values as without
// one: the same tokens, bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "gpt.h"
#include "sampling.h"

namespace trainer {

struct GenerationOptions {
    int sequences = 1;  // B
    int tokens = 0;     // new tokens per sequence
    int context = 0;    // the window: up to max_seq_len and the T the model was built for
    SamplingParams sampling;
    std::uint64_t seed = 0;
    bool kv_cache = true;
    bool cuda_graph = true;  // with the cache: each decoding step as a CUDA graph, where it can
};

// Where a step of generation stands: the tokens the next one is predicted from are the window
// [start, start + length) of each sequence, whose last token the step decodes at position
// length - 1, the cache holding the others at positions 0 .. length - 2 unless `refill`: then
// they are prefilled first (the first step, and every step once the window slides).
struct Window {
    int start;
    int length;
    bool refill;
};
Window window_at(int step, int prompt_length, int context);

// The n = options.tokens new tokens of each sequence, [B][n].
template <typename Act>
std::vector<std::vector<int>> generate_tokens(Gpt<Act>& model, const std::vector<int>& prompt,
                                              const GenerationOptions& options);

}  // namespace trainer
