// Checkpoints of the course's trainer: the model's shape, where training stands (the step, the
// position in the training data, fp16's loss scaler), the fp32 master weights and AdamW's two
// moments, so that a resumed run goes on as the uninterrupted one would. Host code only
// (tests/checkpoint_test.cpp runs it without a GPU).
//
// The file: 64 int32 (magic "GPT1", version 1, L, C, NH, T, V, Vp, the step, the shard, the offset
// in two 31-bit halves, the loss scale's float bits, the steps the scaler skipped, its clean steps
// since the scale last changed; zeros after), then the weights, m and v as float32.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "gpt.h"
#include "loss_scaler.h"

namespace trainer {

struct Checkpoint {
    GptConfig config;
    int step = 0;                       // optimizer steps done
    std::size_t shard = 0, offset = 0;  // where the training data continues
    std::vector<float> params, m, v;
    // fp16's loss scaler (loss_scaler.h); a scale of 0: none recorded (a checkpoint of another
    // dtype, or from before fp16), the scaler starts afresh.
    float loss_scale = 0.0f;
    int skipped = 0, clean_steps = 0;
};

// Written beside `path`, then renamed over it: a crash leaves the old checkpoint whole. Throws
// std::runtime_error where the file cannot be written.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);
// Throws std::runtime_error, one line naming the file: missing, not a checkpoint, truncated.
Checkpoint load_checkpoint(const std::string& path);

// fp16's loss scaler into a checkpoint, and back: AdamW's bias correction counts the steps taken
// (not the skipped ones), and the scale and its clean steps decide the next skips and growth, so
// a resumed fp16 run needs all three. A checkpoint without a scale leaves the scaler as it is.
void record_loss_scaler(const LossScaler& scaler, Checkpoint* checkpoint);
void restore_loss_scaler(const Checkpoint& checkpoint, LossScaler* scaler);

}  // namespace trainer
