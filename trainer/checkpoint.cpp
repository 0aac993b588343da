// trainer/checkpoint: a training run saved and loaded, bit for bit.
// Interface: checkpoint.h
#include "checkpoint.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace trainer {
namespace {

constexpr std::int32_t kCheckpointMagic = 0x47505431;  // "GPT1"
constexpr int kCheckpointHeaderInts = 64;

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint) {
    std::int32_t header[kCheckpointHeaderInts] = {};
    const GptConfig& c = checkpoint.config;
    const std::int32_t fields[] = {kCheckpointMagic,
                                   1,
                                   c.layers,
                                   c.channels,
                                   c.heads,
                                   c.max_seq_len,
                                   c.vocab_size,
                                   c.padded_vocab_size,
                                   checkpoint.step,
                                   static_cast<std::int32_t>(checkpoint.shard),
                                   static_cast<std::int32_t>(checkpoint.offset >> 31),
                                   static_cast<std::int32_t>(checkpoint.offset & 0x7fffffff),
                                   0,  // the loss scale's bits, below
                                   checkpoint.skipped,
                                   checkpoint.clean_steps};
    std::copy(std::begin(fields), std::end(fields), header);
    std::memcpy(&header[12], &checkpoint.loss_scale, sizeof(float));
    const std::string temporary = path + ".partial";
    {
        std::ofstream file(temporary, std::ios::binary);
        file.write(reinterpret_cast<const char*>(header), sizeof header);
        for (const auto* part : {&checkpoint.params, &checkpoint.m, &checkpoint.v})
            file.write(reinterpret_cast<const char*>(part->data()), part->size() * sizeof(float));
        if (!file) throw std::runtime_error(temporary + ": cannot write the checkpoint");
    }
    std::filesystem::rename(temporary, path);
}

Checkpoint load_checkpoint(const std::string& path) {
    std::ifstream file(path, std::ios::binary | std::ios::ate);
    if (!file) throw std::runtime_error(path + ": cannot open the checkpoint");
    const std::streamoff bytes = file.tellg();
    file.seekg(0);
    std::int32_t header[kCheckpointHeaderInts] = {};
    if (!file.read(reinterpret_cast<char*>(header), sizeof header) || header[0] != kCheckpointMagic)
        throw std::runtime_error(path + ": not a train_gpt checkpoint");
    Checkpoint checkpoint;
    checkpoint.config = {header[2], header[3], header[4], header[5], header[6], header[7]};
    checkpoint.step = header[8];
    checkpoint.shard = static_cast<std::size_t>(header[9]);
    checkpoint.offset =
        (static_cast<std::size_t>(header[10]) << 31) | static_cast<std::size_t>(header[11]);
    std::memcpy(&checkpoint.loss_scale, &header[12], sizeof(float));
    checkpoint.skipped = header[13];
    checkpoint.clean_steps = header[14];
    const std::size_t count = param_layout(checkpoint.config).total;
    if (bytes != static_cast<std::streamoff>(sizeof header + 3 * count * sizeof(float)))
        throw std::runtime_error(path + ": truncated checkpoint (" + std::to_string(bytes) +
                                 " bytes for a model of " + describe(checkpoint.config) + ")");
    for (auto* part : {&checkpoint.params, &checkpoint.m, &checkpoint.v}) {
        part->resize(count);
        file.read(reinterpret_cast<char*>(part->data()), count * sizeof(float));
    }
    return checkpoint;
}

void record_loss_scaler(const LossScaler& scaler, Checkpoint* checkpoint) {
    checkpoint->loss_scale = scaler.scale();
    checkpoint->skipped = static_cast<int>(scaler.skipped());
    checkpoint->clean_steps = scaler.clean_steps();
}

void restore_loss_scaler(const Checkpoint& checkpoint, LossScaler* scaler) {
    if (checkpoint.loss_scale > 0.0f)
        scaler->restore(checkpoint.loss_scale, checkpoint.skipped, checkpoint.clean_steps);
}

}  // namespace trainer
