// Checkpoints (checkpoint.h): a saved run comes back bit for bit, fp16's loss scaler included, so
// that a resumed fp16 run skips, grows and counts AdamW's steps as the uninterrupted one; a save
// replaces the file whole; each bad file is one clear error. Runs anywhere (no GPU).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "gpt.h"
#include "loss_scaler.h"
#include "test_support.h"

namespace trainer {
namespace {

using testing::error_of;

std::string scratch_dir() { return testing::scratch_dir("checkpoint_test"); }

// The tiny model's checkpoint at step 20, its three arrays distinct and full of awkward bits
// (negative zero, a subnormal), the data's position past 2^31 tokens (both halves of the offset).
Checkpoint tiny_checkpoint() {
    Checkpoint checkpoint;
    EXPECT_TRUE(gpt_preset("tiny", 257, &checkpoint.config));
    checkpoint.step = 20;
    checkpoint.shard = 3;
    checkpoint.offset = (std::size_t{5} << 31) + 12345;
    const std::size_t count = param_layout(checkpoint.config).total;
    for (auto* part : {&checkpoint.params, &checkpoint.m, &checkpoint.v}) part->resize(count);
    for (std::size_t i = 0; i < count; ++i) {
        checkpoint.params[i] = 0.01f * static_cast<float>(i % 97) - 0.5f;
        checkpoint.m[i] = i % 2 ? -0.0f : std::numeric_limits<float>::denorm_min();
        checkpoint.v[i] = 1e-8f * static_cast<float>(i);
    }
    return checkpoint;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Checkpoint, KeepsTheRunAndFp16sLossScalerBitForBit) {
    const std::string path = scratch_dir() + "/run.ckpt";
    // The uninterrupted run's scaler: one overflow (skipped, the scale halved), then one clean
    // step short of the growth interval.
    LossScaler straight;
    straight.update(false);
    for (int i = 0; i < LossScaler::kGrowthInterval - 1; ++i) straight.update(true);
    Checkpoint saved = tiny_checkpoint();
    record_loss_scaler(straight, &saved);
    save_checkpoint(path, saved);

    const Checkpoint loaded = load_checkpoint(path);
    EXPECT_EQ(std::memcmp(&loaded.config, &saved.config, sizeof saved.config), 0);
    EXPECT_EQ(loaded.step, 20);
    EXPECT_EQ(loaded.shard, 3u);
    EXPECT_EQ(loaded.offset, saved.offset) << "the data's position past 2^31 tokens";
    EXPECT_TRUE(same_bits(loaded.params, saved.params)) << "the master weights";
    EXPECT_TRUE(same_bits(loaded.m, saved.m)) << "AdamW's first moment";
    EXPECT_TRUE(same_bits(loaded.v, saved.v)) << "AdamW's second moment";

    // The resumed run's scaler starts as GradScaler's defaults, then takes the checkpoint's.
    LossScaler resumed;
    restore_loss_scaler(loaded, &resumed);
    EXPECT_EQ(resumed.scale(), LossScaler::kInitialScale / 2) << "the scale after the overflow";
    EXPECT_EQ(resumed.skipped(), 1) << "AdamW's bias correction counts the steps taken only";
    EXPECT_EQ(resumed.clean_steps(), LossScaler::kGrowthInterval - 1);
    // The next clean step grows both scales, an overflow halves both.
    EXPECT_TRUE(straight.update(true));
    EXPECT_TRUE(resumed.update(true));
    EXPECT_EQ(resumed.scale(), LossScaler::kInitialScale);
    EXPECT_EQ(resumed.scale(), straight.scale());
    EXPECT_FALSE(straight.update(false));
    EXPECT_FALSE(resumed.update(false));
    EXPECT_EQ(resumed.scale(), straight.scale());
    EXPECT_EQ(resumed.skipped(), straight.skipped());
    std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

TEST(Checkpoint, WithoutALossScaleTheScalerStartsAfresh) {
    // A bf16 or fp32 run's checkpoint records no scale: fp16 resumed from it starts at 2^16.
    const std::string path = scratch_dir() + "/bf16.ckpt";
    save_checkpoint(path, tiny_checkpoint());
    const Checkpoint loaded = load_checkpoint(path);
    EXPECT_EQ(loaded.loss_scale, 0.0f);
    LossScaler scaler;
    restore_loss_scaler(loaded, &scaler);
    EXPECT_EQ(scaler.scale(), LossScaler::kInitialScale);
    EXPECT_EQ(scaler.skipped(), 0);
    EXPECT_EQ(scaler.clean_steps(), 0);
    std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

TEST(Checkpoint, ASaveReplacesTheFileWhole) {
    const std::string path = scratch_dir() + "/latest.ckpt";
    Checkpoint checkpoint = tiny_checkpoint();
    save_checkpoint(path, checkpoint);
    checkpoint.step = 40;
    save_checkpoint(path, checkpoint);
    EXPECT_EQ(load_checkpoint(path).step, 40);
    EXPECT_FALSE(std::filesystem::exists(path + ".partial")) << "written beside, then renamed";
    std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

TEST(Checkpoint, EachBadFileIsOneClearError) {
    const std::string dir = scratch_dir();
    EXPECT_NE(error_of([&] {
                  load_checkpoint(dir + "/none.ckpt");
              }).find("none.ckpt: cannot open the checkpoint"),
              std::string::npos);
    save_checkpoint(dir + "/cut.ckpt", tiny_checkpoint());
    std::filesystem::resize_file(dir + "/cut.ckpt",
                                 std::filesystem::file_size(dir + "/cut.ckpt") - 4);
    EXPECT_NE(error_of([&] { load_checkpoint(dir + "/cut.ckpt"); })
                  .find("truncated checkpoint (" +
                        std::to_string(std::filesystem::file_size(dir + "/cut.ckpt")) +
                        " bytes for a model of L=2 C=64 NH=4 T=64 V=257)"),
              std::string::npos);
    std::filesystem::resize_file(dir + "/cut.ckpt", 0);
    EXPECT_NE(error_of([&] {
                  load_checkpoint(dir + "/cut.ckpt");
              }).find("cut.ckpt: not a train_gpt checkpoint"),
              std::string::npos);
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace trainer
