// Data for the course's trainer: token shards in llm.c's format and the tokenizer table that
// turns token ids back into text. Host code only (tested without a GPU).
//
// A shard is a header of 256 int32 (magic 20240520, version 1, the number of tokens) followed by
// the tokens as uint16, so shards made by llm.c's scripts (FineWeb, TinyStories) work unchanged.
// The tokenizer file is llm.c's too: 256 uint32 (magic 20240328, version 2, vocabulary size, the
// end-of-text token), then each token's bytes as a length byte and the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

constexpr int kShardMagic = 20240520;
constexpr int kTokenizerMagic = 20240328;

// The tokens of one shard; throws std::runtime_error with one line naming the file and what is
// wrong (missing, not a shard, truncated).
std::vector<std::uint16_t> read_shard(const std::string& path);
void write_shard(const std::string& path, const std::vector<std::uint16_t>& tokens);

// The files a glob pattern names, sorted; throws when there are none.
std::vector<std::string> expand_pattern(const std::string& pattern);

// Micro-batches of B sequences of T tokens read in order through the shards of a pattern, one
// shard in memory at a time, starting over after the last. targets are the inputs shifted by one.
class TokenLoader {
  public:
    // Every token must be below vocab_size; every shard must hold at least B * T + 1 tokens.
    TokenLoader(const std::string& pattern, int vocab_size, int B, int T);
    void next_batch(std::vector<int>* inputs, std::vector<int>* targets);
    void rewind() { seek(0, 0); }
    // Where the next batch starts, for checkpoints.
    std::size_t shard_index() const { return shard_; }
    std::size_t offset() const { return offset_; }
    void seek(std::size_t shard_index, std::size_t offset);
    std::size_t shard_count() const { return files_.size(); }

  private:
    void load(std::size_t shard_index);

    std::vector<std::string> files_;
    int vocab_size_, B_, T_;
    std::vector<std::uint16_t> tokens_;
    std::size_t loaded_ = SIZE_MAX;
    std::size_t shard_ = 0, offset_ = 0;
};

class Tokenizer {
  public:
    explicit Tokenizer(const std::string& path);  // throws on a missing or malformed file
    int vocab_size() const { return static_cast<int>(pieces_.size()); }
    int end_of_text() const { return end_of_text_; }
    const std::string& decode(int token) const { return pieces_.at(token); }

  private:
    std::vector<std::string> pieces_;
    int end_of_text_ = 0;
};

}  // namespace trainer
