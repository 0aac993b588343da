// The op check of module 08's exercise tables (ops_check.cu) on tables made wrong on purpose: the
// op whose output differs from the reference's is named, with its call, shapes and first wrong
// element, whether it writes its output (a residual add with a wrong tail) or updates it in place
// (AdamW without its bias correction); a table that computes what the reference does passes, and
// trains bit for bit as unchecked. Skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "course/check.h"
#include "gpt.h"
#include "ops.h"
#include "ops_check.h"
#include "test_support.h"

namespace trainer {
namespace {

using testing::gpu_present;

constexpr int kB = 2, kT = 29;

const Ops<float>& reference() { return *ops_table<float>("reference"); }

// The reference's residual add, its last element then off by one: a tail a kernel forgot.
void residual_with_a_wrong_tail(float* out, const float* a, const float* b, long long n) {
    reference().residual_forward(out, a, b, n);
    float last = 0.0f;
    CUDA_CHECK(cudaMemcpy(&last, out + n - 1, sizeof last, cudaMemcpyDeviceToHost));
    last += 1.0f;
    CUDA_CHECK(cudaMemcpy(out + n - 1, &last, sizeof last, cudaMemcpyHostToDevice));
}

// The reference's AdamW, with the moments taken as they are: no bias correction.
void adamw_without_bias_correction(float* master, float* working, const float* grads, float* m,
                                   float* v, long long n, float lr, float beta1, float beta2, float,
                                   float, float eps, float weight_decay, float grad_scale) {
    reference().adamw(master, working, grads, m, v, n, lr, beta1, beta2, 1.0f, 1.0f, eps,
                      weight_decay, grad_scale);
}

std::string residual_named(TrainerOp op) {
    return op == TrainerOp::kResidualForward ? "residual (the test's)" : "";
}
std::string adamw_named(TrainerOp op) {
    return op == TrainerOp::kAdamW ? "adamw (the test's)" : "";
}
std::string every_op_named(TrainerOp op) {
    return op == TrainerOp::kSumOfSquares ? "" : "every op (the test's)";
}

// Trains `steps` steps of the tiny model with `table` from fixed weights and data; the losses.
std::vector<float> train(const Ops<float>& table, int steps) {
    const GptConfig config = testing::tiny_config();
    Gpt<float> model(config, table, kB, kT);
    model.set_params(testing::noisy_params(config, 5));
    std::vector<int> inputs, targets;
    std::vector<float> losses;
    for (int step = 0; step < steps; ++step) {
        testing::tokens(kB * kT, 7 + step, &inputs, &targets);
        model.zero_grads();
        losses.push_back(
            model.forward_backward(inputs.data(), targets.data(), kB, kT, 1.0f / (kB * kT)));
        model.update(1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, step + 1);
    }
    return losses;
}

std::string op_check_error(const Ops<float>& checked, int steps) {
    try {
        train(checked, steps);
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "";
}

TEST(OpCheck, NamesAnOpThatWritesAWrongElement) {
    if (!gpu_present()) GTEST_SKIP() << "no CUDA GPU";
    Ops<float> tested = reference();
    tested.residual_forward = residual_with_a_wrong_tail;
    const std::string error =
        op_check_error(*checked_table(tested, reference(), residual_named, 1, 0), 1);
    const long long n = 1LL * kB * kT * testing::tiny_config().channels;
    EXPECT_NE(error.find("op check: step 0, residual_forward call 1 (n " + std::to_string(n) +
                         "; residual (the test's)): out: 1 of " + std::to_string(n) + " values"),
              std::string::npos)
        << error;
    EXPECT_NE(error.find("the first at [" + std::to_string(n - 1) + "]"), std::string::npos)
        << error;
}

TEST(OpCheck, NamesAnOpThatUpdatesInPlaceWrongly) {
    if (!gpu_present()) GTEST_SKIP() << "no CUDA GPU";
    Ops<float> tested = reference();
    tested.adamw = adamw_without_bias_correction;
    const std::string error =
        op_check_error(*checked_table(tested, reference(), adamw_named, 1, 0), 1);
    // The first tensor updated (wte): the moments agree, the weights' change does not.
    EXPECT_NE(error.find("op check: step 0, adamw call 1 (n "), std::string::npos) << error;
    EXPECT_NE(error.find("; adamw (the test's)): master: "), std::string::npos) << error;
    EXPECT_NE(error.find("reference's change"), std::string::npos) << error;
}

TEST(OpCheck, LeavesATableLikeTheReferenceAloneAndTrainsAsUnchecked) {
    if (!gpu_present()) GTEST_SKIP() << "no CUDA GPU";
    const Ops<float> tested = reference();  // the same functions: nothing may differ
    const std::vector<float> unchecked = train(tested, 3);
    const std::vector<float> checked =
        train(*checked_table(tested, reference(), every_op_named, 1, 0), 3);
    EXPECT_EQ(checked, unchecked);  // fp32: every op deterministic, bit for bit
}

}  // namespace
}  // namespace trainer
