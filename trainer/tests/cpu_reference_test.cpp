// The CPU reference's gradients against central finite differences of its own loss, for a few
// parameters of every tensor of the tiny model. Runs anywhere (no GPU).
#include <gtest/gtest.h>

#include <cmath>

#include "cpu_reference.h"
#include "test_support.h"

namespace trainer {
namespace {

TEST(CpuReference, GradientsMatchFiniteDifferences) {
    const GptConfig config = testing::tiny_config();
    const int B = 2, T = 7;
    std::vector<int> inputs, targets;
    testing::tokens(B * T, 5, &inputs, &targets);
    CpuGpt model(config, testing::noisy_params(config, 3));
    model.forward(inputs, targets, B, T);
    const std::vector<double> grads = model.backward();

    const ParamLayout layout = param_layout(config);
    const double h = 1e-5;
    for (int tensor = 0; tensor < kParamTensors; ++tensor) {
        // The first, a middle and the last element that the batch reaches (wte: a used row;
        // wpe: a row below T).
        std::size_t reach = layout.size[tensor];
        if (tensor == kPositionEmbedding) reach = static_cast<std::size_t>(T) * config.channels;
        std::vector<std::size_t> picks = {0, reach / 2 + 1, reach - 1};
        if (tensor == kTokenEmbedding)
            picks = {static_cast<std::size_t>(inputs[0]) * config.channels + 3,
                     static_cast<std::size_t>(targets[1]) * config.channels + 7};
        for (std::size_t pick : picks) {
            const std::size_t i = layout.offset[tensor] + pick;
            double& p = model.params()[i];
            const double saved = p;
            p = saved + h;
            const double up = model.forward(inputs, targets, B, T);
            p = saved - h;
            const double down = model.forward(inputs, targets, B, T);
            p = saved;
            const double numeric = (up - down) / (2 * h);
            EXPECT_NEAR(grads[i], numeric, 1e-8 + 1e-5 * std::fabs(numeric))
                << param_name(tensor) << "[" << pick << "]";
        }
    }
}

TEST(CpuReference, LossOfUniformLogitsIsLogVocab) {
    // All-zero weights give zero logits: the loss is log V whatever the tokens.
    const GptConfig config = testing::tiny_config();
    std::vector<float> params(param_layout(config).total, 0.0f);
    std::vector<int> inputs, targets;
    testing::tokens(8, 9, &inputs, &targets);
    CpuGpt model(config, params);
    EXPECT_NEAR(model.forward(inputs, targets, 1, 8),
                std::log(static_cast<double>(config.vocab_size)), 1e-12);
}

}  // namespace
}  // namespace trainer
