// fp16's dynamic loss scaling in the course's trainer: the state machine of PyTorch's
// torch.amp.GradScaler, with its defaults. Host code only (tests/loss_scaler_test.cpp runs it
// without a GPU).
//
// Why: fp16 has 5 exponent bits. Below 2^-24 a value is 0, above 65504 it is inf. The gradients of
// the activations are small (the loss is a mean over every token of the step, so its gradient is
// 1 / tokens per logit), and many would round to 0 in fp16. So the backward starts from the loss
// times a scale (the cross-entropy writes its gradient scaled), every gradient of the backward
// carries the factor, and the optimizer divides it out of the fp32 gradients of the parameters in
// the pass it makes over them anyway (gpt.h: Gpt::update). A scale too large overflows somewhere:
// an inf or NaN reaches the parameter gradients and their norm; that step is not taken and the
// scale is halved. After kGrowthInterval clean steps in a row it is doubled, to stay near the
// largest scale that does not overflow. The scale is a power of two, so scaling and unscaling are
// exact.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>

namespace trainer {

class LossScaler {
  public:
    static constexpr float kInitialScale = 65536.0f;  // 2^16, GradScaler's init_scale
    static constexpr int kGrowthInterval = 2000;      // GradScaler's growth_interval
    // Below this the gradients overflow fp16 unscaled: the run diverges, scaling cannot help.
    static constexpr float kSmallestScale = 1.0f;

    explicit LossScaler(float scale = kInitialScale, int growth_interval = kGrowthInterval)
        : scale_(scale), growth_interval_(growth_interval) {}

    float scale() const { return scale_; }
    // Steps skipped so far (overflows), and clean steps since the scale last changed.
    long skipped() const { return skipped_; }
    int clean_steps() const { return clean_steps_; }
    // A checkpoint's state (train_gpt saves all three).
    void restore(float scale, long skipped, int clean_steps) {
        scale_ = scale;
        skipped_ = skipped;
        clean_steps_ = clean_steps;
    }

    // After a step's gradients were checked; returns `finite`, whether the step is taken. An
    // overflow (not finite) skips the step, halves the scale and starts the count of clean steps
    // again; the growth_interval-th clean step in a row doubles the scale (where the double is
    // still finite) and starts it again. Throws where the scale falls below kSmallestScale.
    bool update(bool finite) {
        if (!finite) {
            ++skipped_;
            clean_steps_ = 0;
            scale_ *= 0.5f;
            if (scale_ < kSmallestScale)
                throw std::runtime_error(
                    "the gradients overflow fp16 even without loss scaling (" +
                    std::to_string(skipped_) +
                    " steps skipped): the run diverges; lower the learning rate (--lr) or train "
                    "in fp32 (--dtype fp32)");
            return false;
        }
        if (++clean_steps_ == growth_interval_) {
            if (std::isfinite(2.0f * scale_)) scale_ *= 2.0f;
            clean_steps_ = 0;
        }
        return true;
    }

  private:
    float scale_;
    int growth_interval_;
    long skipped_ = 0;
    int clean_steps_ = 0;
};

}  // namespace trainer
