// Token shards and the tokenizer file: round trips, batch order, and one clear error for each
// kind of bad file. Runs anywhere (no GPU).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "data.h"
#include "test_support.h"

namespace trainer {
namespace {

using testing::error_of;

std::string scratch_dir() { return testing::scratch_dir("data_test"); }

std::vector<std::uint16_t> counting(int n) {
    std::vector<std::uint16_t> tokens(n);
    for (int i = 0; i < n; ++i) tokens[i] = static_cast<std::uint16_t>(i % 50);
    return tokens;
}

TEST(Shards, RoundTripAndBatchesInOrderAcrossShards) {
    const std::string dir = scratch_dir();
    write_shard(dir + "/train_000.bin", counting(21));
    write_shard(dir + "/train_001.bin", std::vector<std::uint16_t>(21, 7));
    EXPECT_EQ(read_shard(dir + "/train_000.bin"), counting(21));
    TokenLoader loader(dir + "/train_*.bin", 50, 2, 5);  // 10 tokens per batch, 11 read
    std::vector<int> inputs, targets;
    loader.next_batch(&inputs, &targets);
    EXPECT_EQ(inputs[0], 0);
    EXPECT_EQ(targets[9], 10);
    loader.next_batch(&inputs, &targets);  // tokens 10..20
    EXPECT_EQ(inputs[0], 10);
    EXPECT_EQ(targets[9], 20);
    loader.next_batch(&inputs, &targets);  // the first shard cannot fill a third: the second shard
    EXPECT_EQ(loader.shard_index(), 1u);
    EXPECT_EQ(inputs[0], 7);
    loader.next_batch(&inputs, &targets);
    loader.next_batch(&inputs, &targets);  // and back to the first
    EXPECT_EQ(loader.shard_index(), 0u);
    EXPECT_EQ(inputs[0], 0);
    loader.seek(0, 10);
    loader.next_batch(&inputs, &targets);
    EXPECT_EQ(inputs[0], 10);
    std::filesystem::remove_all(dir);
}

TEST(Shards, EachBadFileIsOneClearError) {
    const std::string dir = scratch_dir();
    EXPECT_NE(
        error_of([&] { TokenLoader(dir + "/none_*.bin", 50, 1, 4); }).find("no data shard matches"),
        std::string::npos);
    {
        std::ofstream text(dir + "/text.bin");
        text << std::string(2048, 'x');
    }
    EXPECT_NE(error_of([&] { read_shard(dir + "/text.bin"); }).find("not a token shard"),
              std::string::npos);
    write_shard(dir + "/cut.bin", counting(100));
    std::filesystem::resize_file(dir + "/cut.bin", 1024 + 2 * 60);
    EXPECT_NE(error_of([&] { read_shard(dir + "/cut.bin"); }).find("truncated"), std::string::npos);
    write_shard(dir + "/small_000.bin", counting(8));
    EXPECT_NE(error_of([&] {
                  TokenLoader(dir + "/small_*.bin", 50, 2, 4);
              }).find("fewer than one micro-batch"),
              std::string::npos);
    write_shard(dir + "/wide_000.bin", counting(40));
    EXPECT_NE(error_of([&] {
                  TokenLoader(dir + "/wide_*.bin", 30, 1, 4);
              }).find("outside the tokenizer's vocabulary"),
              std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST(Tokenizer, ReadsLlmcFormat) {
    const std::string path = scratch_dir() + "/tokenizer.bin";
    {
        std::uint32_t header[256] = {20240328, 2, 3, 2};
        std::ofstream file(path, std::ios::binary);
        file.write(reinterpret_cast<const char*>(header), sizeof header);
        for (const std::string piece : {"a", " bc", "<|endoftext|>"}) {
            const unsigned char length = static_cast<unsigned char>(piece.size());
            file.write(reinterpret_cast<const char*>(&length), 1);
            file.write(piece.data(), piece.size());
        }
    }
    const Tokenizer tokenizer(path);
    EXPECT_EQ(tokenizer.vocab_size(), 3);
    EXPECT_EQ(tokenizer.end_of_text(), 2);
    EXPECT_EQ(tokenizer.decode(1), " bc");
    std::filesystem::resize_file(path, 1024 + 3);
    EXPECT_NE(error_of([&] { Tokenizer{path}; }).find("ends"), std::string::npos);
    EXPECT_NE(error_of([&] { Tokenizer{path + ".missing"}; }).find("cannot open"),
              std::string::npos);
}

}  // namespace
}  // namespace trainer
