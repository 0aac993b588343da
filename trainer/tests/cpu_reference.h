// A CPU reference of the trainer's GPT in double precision: the same parameters (gpt.h's flat
// layout), the same math, written as plainly as possible. The tests check its gradients against
// finite differences, then the GPU model against it.
#pragma once

#include <vector>

#include "gpt.h"

namespace trainer {

class CpuGpt {
  public:
    CpuGpt(const GptConfig& config, const std::vector<float>& params);
    std::vector<double>& params() { return params_; }
    // Mean cross-entropy of B x T tokens; keeps what backward() needs.
    double forward(const std::vector<int>& inputs, const std::vector<int>& targets, int B, int T);
    // d(mean loss)/d(params) of the last forward.
    std::vector<double> backward();
    const std::vector<double>& logits() const { return logits_; }  // [B, T, Vp]

  private:
    GptConfig config_;
    ParamLayout layout_;
    std::vector<double> params_;
    int B_ = 0, T_ = 0;
    std::vector<int> inputs_, targets_;
    // Activations, [L][...] flattened where per layer.
    std::vector<double> encoded_, ln1_, ln1_mean_, ln1_rstd_, qkv_, att_, atty_, residual2_, ln2_,
        ln2_mean_, ln2_rstd_, fch_, fch_gelu_, residual3_, lnf_, lnf_mean_, lnf_rstd_, logits_,
        probs_;
};

}  // namespace trainer
