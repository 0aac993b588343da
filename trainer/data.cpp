// trainer/data: llm.c's token shards and tokenizer file, read with one clear error per problem.
// Interface: data.h
#include "data.h"

#include <glob.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace trainer {

namespace {

constexpr int kHeaderInts = 256;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw std::runtime_error(path + ": " + what);
}

}  // namespace

std::vector<std::uint16_t> read_shard(const std::string& path) {
    std::ifstream file(path, std::ios::binary | std::ios::ate);
    if (!file) fail(path, "cannot open the data shard");
    const std::streamoff bytes = file.tellg();
    file.seekg(0);
    std::int32_t header[kHeaderInts] = {};
    if (bytes < static_cast<std::streamoff>(sizeof header) ||
        !file.read(reinterpret_cast<char*>(header), sizeof header))
        fail(path, "too short for a token shard's header (corrupt or not a shard?)");
    if (header[0] != kShardMagic)
        fail(path, "not a token shard (magic " + std::to_string(header[0]) + ", expected " +
                       std::to_string(kShardMagic) + "): make shards with trainer/prepare_data.py");
    if (header[1] != 1)
        fail(path, "token shard version " + std::to_string(header[1]) + ", expected 1");
    const std::int64_t count = header[2];
    const std::int64_t held = (bytes - static_cast<std::streamoff>(sizeof header)) / 2;
    if (count < 0 || count != held)
        fail(path, "the header promises " + std::to_string(count) + " tokens but the file holds " +
                       std::to_string(held) + " (truncated or corrupt)");
    std::vector<std::uint16_t> tokens(count);
    if (!file.read(reinterpret_cast<char*>(tokens.data()), count * 2)) fail(path, "read error");
    return tokens;
}

void write_shard(const std::string& path, const std::vector<std::uint16_t>& tokens) {
    std::int32_t header[kHeaderInts] = {kShardMagic, 1, static_cast<std::int32_t>(tokens.size())};
    std::ofstream file(path, std::ios::binary);
    file.write(reinterpret_cast<const char*>(header), sizeof header);
    file.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
    if (!file) fail(path, "cannot write the data shard");
}

std::vector<std::string> expand_pattern(const std::string& pattern) {
    glob_t found{};
    std::vector<std::string> files;
    if (glob(pattern.c_str(), 0, nullptr, &found) == 0)
        for (std::size_t i = 0; i < found.gl_pathc; ++i) files.emplace_back(found.gl_pathv[i]);
    globfree(&found);
    if (files.empty())
        fail(pattern,
             "no data shard matches (run trainer/prepare_data.py first, or check the path)");
    std::sort(files.begin(), files.end());
    return files;
}

TokenLoader::TokenLoader(const std::string& pattern, int vocab_size, int B, int T)
    : files_(expand_pattern(pattern)), vocab_size_(vocab_size), B_(B), T_(T) {
    load(0);
}

void TokenLoader::load(std::size_t shard_index) {
    if (loaded_ == shard_index) return;
    tokens_ = read_shard(files_[shard_index]);
    const std::size_t needed = static_cast<std::size_t>(B_) * T_ + 1;
    if (tokens_.size() < needed)
        fail(files_[shard_index], "holds " + std::to_string(tokens_.size()) +
                                      " tokens, fewer than one micro-batch needs (B * T + 1 = " +
                                      std::to_string(needed) + "): lower -b or -t");
    const std::uint16_t largest = *std::max_element(tokens_.begin(), tokens_.end());
    if (largest >= vocab_size_)
        fail(files_[shard_index], "holds token id " + std::to_string(largest) +
                                      ", outside the tokenizer's vocabulary of " +
                                      std::to_string(vocab_size_) +
                                      " (shards and tokenizer from different runs?)");
    loaded_ = shard_index;
}

void TokenLoader::seek(std::size_t shard_index, std::size_t offset) {
    if (shard_index >= files_.size())
        throw std::runtime_error("data position " + std::to_string(shard_index) +
                                 " is past the last shard (" + std::to_string(files_.size()) + ")");
    load(shard_index);
    shard_ = shard_index;
    offset_ = offset;
}

void TokenLoader::next_batch(std::vector<int>* inputs, std::vector<int>* targets) {
    const std::size_t span = static_cast<std::size_t>(B_) * T_;
    if (offset_ + span + 1 > tokens_.size()) {  // this shard cannot fill another batch
        shard_ = (shard_ + 1) % files_.size();
        offset_ = 0;
    }
    load(shard_);
    inputs->resize(span);
    targets->resize(span);
    for (std::size_t i = 0; i < span; ++i) {
        (*inputs)[i] = tokens_[offset_ + i];
        (*targets)[i] = tokens_[offset_ + i + 1];
    }
    offset_ += span;
}

Tokenizer::Tokenizer(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    if (!file) fail(path, "cannot open the tokenizer file (made by trainer/prepare_data.py)");
    std::uint32_t header[kHeaderInts] = {};
    if (!file.read(reinterpret_cast<char*>(header), sizeof header))
        fail(path, "too short for a tokenizer file");
    if (header[0] != static_cast<std::uint32_t>(kTokenizerMagic))
        fail(path, "not a tokenizer file (magic " + std::to_string(header[0]) + ")");
    if (header[1] != 1 && header[1] != 2)
        fail(path, "tokenizer version " + std::to_string(header[1]) + ", expected 1 or 2");
    const std::uint32_t count = header[2];
    end_of_text_ = header[1] == 2 ? static_cast<int>(header[3]) : static_cast<int>(count) - 1;
    pieces_.resize(count);
    for (std::uint32_t i = 0; i < count; ++i) {
        unsigned char length = 0;
        if (!file.read(reinterpret_cast<char*>(&length), 1))
            fail(path, "ends after " + std::to_string(i) + " of its " + std::to_string(count) +
                           " tokens");
        pieces_[i].resize(length);
        if (length && !file.read(pieces_[i].data(), length))
            fail(path, "ends inside token " + std::to_string(i));
    }
}

}  // namespace trainer
