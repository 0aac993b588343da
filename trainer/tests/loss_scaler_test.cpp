// fp16's loss scaler (loss_scaler.h) against PyTorch's GradScaler rules: an overflow skips the
// step and halves the scale, the growth interval's clean steps in a row double it, an overflow
// starts the count again. Runs anywhere (no GPU).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "loss_scaler.h"

namespace trainer {
namespace {

TEST(LossScaler, StartsAtGradScalersDefaults) {
    const LossScaler scaler;
    EXPECT_EQ(scaler.scale(), 65536.0f);
    EXPECT_EQ(scaler.skipped(), 0);
    EXPECT_EQ(scaler.clean_steps(), 0);
}

TEST(LossScaler, AnOverflowSkipsTheStepAndHalvesTheScale) {
    LossScaler scaler;
    EXPECT_FALSE(scaler.update(false)) << "a step whose gradients overflowed must not be taken";
    EXPECT_EQ(scaler.scale(), 32768.0f);
    EXPECT_EQ(scaler.skipped(), 1);
    EXPECT_FALSE(scaler.update(false));
    EXPECT_EQ(scaler.scale(), 16384.0f) << "every overflow halves the scale";
    EXPECT_EQ(scaler.skipped(), 2);
}

TEST(LossScaler, CleanStepsAreTakenAndGrowTheScaleAfterTheInterval) {
    LossScaler scaler(1024.0f, 5);
    for (int i = 1; i < 5; ++i) {
        EXPECT_TRUE(scaler.update(true));
        EXPECT_EQ(scaler.scale(), 1024.0f) << "grew after " << i << " clean steps of 5";
        EXPECT_EQ(scaler.clean_steps(), i);
    }
    EXPECT_TRUE(scaler.update(true));
    EXPECT_EQ(scaler.scale(), 2048.0f) << "the 5th clean step in a row doubles the scale";
    EXPECT_EQ(scaler.clean_steps(), 0) << "the count starts again after growing";
    for (int i = 0; i < 5; ++i) scaler.update(true);
    EXPECT_EQ(scaler.scale(), 4096.0f);
    EXPECT_EQ(scaler.skipped(), 0);
}

TEST(LossScaler, TheDefaultIntervalIs2000CleanSteps) {
    LossScaler scaler;
    for (int i = 0; i < 1999; ++i) scaler.update(true);
    EXPECT_EQ(scaler.scale(), 65536.0f);
    scaler.update(true);
    EXPECT_EQ(scaler.scale(), 131072.0f);
}

TEST(LossScaler, AnOverflowStartsTheCountOfCleanStepsAgain) {
    LossScaler scaler(1024.0f, 5);
    for (int i = 0; i < 4; ++i) scaler.update(true);
    scaler.update(false);
    EXPECT_EQ(scaler.scale(), 512.0f);
    EXPECT_EQ(scaler.clean_steps(), 0);
    for (int i = 0; i < 4; ++i) scaler.update(true);
    EXPECT_EQ(scaler.scale(), 512.0f) << "grew on clean steps counted from before the overflow";
    scaler.update(true);
    EXPECT_EQ(scaler.scale(), 1024.0f);
}

TEST(LossScaler, NeverGrowsToInfinity) {
    LossScaler scaler(0x1p127f, 1);
    scaler.update(true);
    EXPECT_EQ(scaler.scale(), 0x1p127f) << "doubling 2^127 is inf in float: the scale stays";
    EXPECT_EQ(scaler.clean_steps(), 0);
}

TEST(LossScaler, StopsWhereTheScaleFallsBelowOne) {
    LossScaler scaler(2.0f);
    scaler.update(false);
    EXPECT_EQ(scaler.scale(), 1.0f);
    try {
        scaler.update(false);
        FAIL() << "a scale below 1 should stop the run";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("overflow fp16 even without loss scaling"),
                  std::string::npos)
            << e.what();
    }
}

TEST(LossScaler, RestoresACheckpointsState) {
    LossScaler scaler(1024.0f, 5);
    scaler.restore(256.0f, 7, 3);
    EXPECT_EQ(scaler.scale(), 256.0f);
    EXPECT_EQ(scaler.skipped(), 7);
    scaler.update(true);
    scaler.update(true);
    EXPECT_EQ(scaler.scale(), 512.0f) << "the restored clean steps count toward growth";
}

}  // namespace
}  // namespace trainer
