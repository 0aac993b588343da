// trainer/generate: the loop of generation around the model, with the KV cache or without.
//
// Teaches: what a KV cache saves. Without it, each new token runs the whole window through the
// model again (t tokens of work for the t-th token); with it, a prefill runs the prompt once, and
// each new token runs the layers for itself alone, reading the earlier tokens' keys and values
// from the cache. And what it cannot save here: GPT-2's positions are absolute, so once the window
// slides, every cached key sits at the wrong position and the cache is filled again. With the cache
// a step is little work in many small kernels, so the host must not stand between two steps: the
// model runs each one as a CUDA graph, and this loop enqueues step after step, taking the tokens
// drawn only where a refill needs them, and at the end.
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
    // With the cache, the tokens drawn stay with the model until a refill needs them, or the end:
    // the host enqueues step after step without waiting for the GPU.
    const auto take_drawn = [&] {
        const std::vector<std::vector<int>> drawn = model.drawn_tokens();
        for (int b = 0; b < B; ++b)
            sequences[b].insert(sequences[b].end(), drawn[b].begin(), drawn[b].end());
    };
    std::vector<float> u(B);
    std::vector<int> next(B), window;
    for (int step = 0; step < options.tokens; ++step) {
        const Window w = window_at(step, static_cast<int>(prompt.size()), options.context);
        for (float& x : u) x = uniforms.next();
        if (options.kv_cache) {
            // A refill gives the step its tokens; the other steps decode the last step's draws.
            if (w.refill) {
                if (step > 0) take_drawn();
                for (int b = 0; b < B; ++b) {
                    model.prefill(b, sequences[b].data() + w.start, w.length - 1);
                    next[b] = sequences[b].back();
                }
            }
            model.decode(w.refill ? next.data() : nullptr, B, w.length - 1, u.data(),
                         options.sampling, options.cuda_graph);
        } else {
            window.clear();
            for (const std::vector<int>& sequence : sequences)
                window.insert(window.end(), sequence.begin() + w.start, sequence.end());
            const std::vector<float> logits = model.next_token_logits(window.data(), B, w.length);
            for (int b = 0; b < B; ++b)
                sequences[b].push_back(sample_token(logits.data() + static_cast<std::size_t>(b) * V,
                                                    V, options.sampling, u[b]));
        }
    }
    if (options.kv_cache && options.tokens > 0) take_drawn();
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
