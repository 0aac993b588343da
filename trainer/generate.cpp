// trainer/generate: the loop of generation around the model, with the KV cache or without.
//
// Teaches: what a KV cache saves. Without it, each new token runs the whole window through the
// model again (t tokens of work for the t-th token); with it, a prefill runs the prompt once, and
// each new token runs the layers for itself alone, reading the earlier tokens' keys and values
// from the cache. And what it cannot save here: GPT-2's positions are absolute, so once the window
// slides, every cached key sits at the wrong position and the cache is filled again.
//
// Interface: generate.h. Tests: tests/kv_cache_test.cpp (the window, without a GPU) and
// tests/generation_test.cu.
#include "generate.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace trainer {

Window window_at(int step, int prompt_length, int context) {
    const int length = prompt_length + step;  // the tokens of each sequence so far
    const int start = std::max(0, length - context);
    return {start, length - start, step == 0 || start > 0};
}

template <typename Act>
std::vector<std::vector<int>> generate_tokens(Gpt<Act>& model, const std::vector<int>& prompt,
                                              const GenerationOptions& options) {
    const int B = options.sequences, V = model.config().vocab_size;
    if (prompt.empty()) throw std::invalid_argument("generation needs a prompt of a token or more");
    if (B < 1 || options.context < 1 || options.context > model.config().max_seq_len)
        throw std::invalid_argument("generation of " + std::to_string(B) +
                                    " sequences in a context of " +
                                    std::to_string(options.context) + " (the model's is " +
                                    std::to_string(model.config().max_seq_len) + ")");
    if (options.kv_cache) model.reserve_kv_cache(B);
    UniformStream uniforms(options.seed);
    std::vector<std::vector<int>> sequences(B, prompt);
    std::vector<float> u(B);
    std::vector<int> next(B), window;
    for (int step = 0; step < options.tokens; ++step) {
        const Window w = window_at(step, static_cast<int>(prompt.size()), options.context);
        for (float& x : u) x = uniforms.next();
        if (options.kv_cache) {
            for (int b = 0; b < B && w.refill; ++b)
                model.prefill(b, sequences[b].data() + w.start, w.length - 1);
            for (int b = 0; b < B; ++b) next[b] = sequences[b].back();
            model.decode(next.data(), B, w.length - 1);
            model.sample_next(next.data(), u.data(), B, options.sampling);
        } else {
            window.clear();
            for (const std::vector<int>& sequence : sequences)
                window.insert(window.end(), sequence.begin() + w.start, sequence.end());
            const std::vector<float> logits = model.next_token_logits(window.data(), B, w.length);
            for (int b = 0; b < B; ++b)
                next[b] = sample_token(logits.data() + static_cast<std::size_t>(b) * V, V,
                                       options.sampling, u[b]);
        }
        for (int b = 0; b < B; ++b) sequences[b].push_back(next[b]);
    }
    for (std::vector<int>& sequence : sequences)
        sequence.erase(sequence.begin(), sequence.begin() + prompt.size());
    return sequences;
}

template std::vector<std::vector<int>> generate_tokens(Gpt<float>&, const std::vector<int>&,
                                                       const GenerationOptions&);
template std::vector<std::vector<int>> generate_tokens(Gpt<bf16>&, const std::vector<int>&,
                                                       const GenerationOptions&);
template std::vector<std::vector<int>> generate_tokens(Gpt<fp16>&, const std::vector<int>&,
                                                       const GenerationOptions&);

}  // namespace trainer
