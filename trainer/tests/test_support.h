// Shared by the trainer's tests: the tiny model with a small vocabulary, its weights (GPT-2's
// initialization plus noise, so that no gradient is zero or symmetric by accident) and a batch; a
// scratch folder per test program and the message of an error a call throws.
#pragma once

#include <cuda_runtime.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpt.h"

namespace trainer::testing {

// Whether a CUDA GPU of at least this compute capability (major) is here; the GPU tests skip
// without one.
inline bool gpu_present(int min_major = 0) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return false;
    cudaDeviceProp properties{};
    cudaGetDeviceProperties(&properties, 0);
    return properties.major >= min_major;
}

constexpr int kVocab = 67;  // padded to 128: the padding columns are exercised too

inline GptConfig tiny_config() {
    GptConfig config;
    gpt_preset("tiny", kVocab, &config);
    return config;
}

// One layer of two heads of 64: the head size of GPT-2 (attention's flash way in bf16).
inline GptConfig head64_config() {
    GptConfig config = tiny_config();
    config.layers = 1;
    config.channels = 128;
    config.heads = 2;
    return config;
}

inline std::vector<float> noisy_params(const GptConfig& config, std::uint64_t seed) {
    std::vector<float> params = initial_params(config, seed);
    std::uint64_t state = seed * 2654435761u + 1;
    const ParamLayout layout = param_layout(config);
    for (std::size_t i = 0; i < params.size(); ++i) {
        if (i < layout.offset[kTokenEmbedding] + layout.size[kTokenEmbedding] &&
            i >= static_cast<std::size_t>(config.vocab_size) * config.channels)
            continue;  // wte's padding rows stay 0
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        params[i] += 0.05f * (static_cast<float>(state >> 40) / 16777216.0f - 0.5f);
    }
    return params;
}

inline void tokens(int count, std::uint64_t seed, std::vector<int>* inputs,
                   std::vector<int>* targets) {
    inputs->resize(count);
    targets->resize(count);
    std::uint64_t state = seed;
    for (int i = 0; i < count; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        (*inputs)[i] = static_cast<int>((state >> 33) % kVocab);
        (*targets)[i] = static_cast<int>((state >> 13) % kVocab);
    }
}

// A folder of its own under the system's temporary folder for the test program `name` (this
// process's id in it), made if missing.
inline std::string scratch_dir(const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("trainer_" + name + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return dir.string();
}

// What `action` throws as a std::runtime_error, or "(no error)".
inline std::string error_of(const std::function<void()>& action) {
    try {
        action();
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace trainer::testing
