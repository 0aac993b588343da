// Checker of 03_patterns/histogram: uniform bytes, a skewed input (90% one value) and a single
// value repeated (every thread on the same counter), at sizes around a warp, around 256 and a
// uint4, a prime and 2^24 + 3; then 2^28 bytes timed against CUB, uniform and single-valued;
// then 2^32 - 1 bytes, the contract's largest.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/reduce.h"
#include "course/testing.h"
#include "histogram.h"

namespace {

class Histogram : public course::GpuTest {};

std::vector<std::uint8_t> uniform_bytes(std::size_t n, course::Rng& rng) {
    std::vector<std::uint8_t> bytes(n);
    for (std::size_t i = 0; i < n; i += 8) {
        const std::uint64_t bits = rng.next_u64();
        for (std::size_t k = 0; k < 8 && i + k < n; ++k)
            bytes[i + k] = static_cast<std::uint8_t>(bits >> (8 * k));
    }
    return bytes;
}

// 90% of the bytes are `common`, the rest uniform.
std::vector<std::uint8_t> skewed_bytes(std::size_t n, std::uint8_t common, course::Rng& rng) {
    std::vector<std::uint8_t> bytes = uniform_bytes(n, rng);
    for (auto& b : bytes)
        if (rng.uniform01() < 0.9) b = common;
    return bytes;
}

constexpr const char* kZeroedHint =
    "were all the shared-memory counters zeroed before counting? Zero every one, whatever the "
    "block size (a loop from threadIdx.x in steps of blockDim.x), then __syncthreads()";

// What the wrong counts suggest: bins never zeroed (all of them, or a part of the shared
// counters), bytes lost or doubled (past 2^31?), or bytes in the wrong bins.
std::string diagnose(const std::vector<unsigned int>& got, const std::vector<std::uint64_t>& want,
                     std::size_t n) {
    bool off_by_poison = true, wrong_ones_too_high = true;
    std::uint64_t total = 0;
    std::size_t first_wrong = got.size(), last_wrong = 0, wrong = 0;
    for (std::size_t v = 0; v < got.size(); ++v) {
        // unsigned arithmetic wraps: counting on top of the garbage leaves exactly the garbage.
        off_by_poison &= got[v] - static_cast<unsigned int>(want[v]) ==
                         static_cast<unsigned int>(course::poison_pattern<unsigned int>());
        total += got[v];
        if (got[v] != want[v]) {
            ++wrong;
            first_wrong = std::min(first_wrong, v);
            last_wrong = v;
            wrong_ones_too_high &= got[v] > want[v];
        }
    }
    if (off_by_poison)
        return "every bin is off by exactly the garbage the checker put in `bins` before the "
               "call: the launcher must zero the bins first (cudaMemsetAsync)";
    // Counters left with what the block before had counted: a range of bins, each too high.
    if (wrong < got.size() && wrong == last_wrong - first_wrong + 1 && wrong > 1 &&
        wrong_ones_too_high)
        return "only bins " + std::to_string(first_wrong) + ".." + std::to_string(last_wrong) +
               " are wrong, each too high, every other bin is exact: " + kZeroedHint;
    constexpr std::size_t kTwoTo31 = std::size_t{1} << 31;
    if (total < n && n > kTwoTo31)
        return "the counts add up to " + std::to_string(total) + ", but there are " +
               std::to_string(n) +
               " bytes: bytes past 2^31 were not counted? An index computed in 32-bit int "
               "arithmetic overflows at 2^31: compute byte and chunk indices in std::size_t";
    if (total > n)
        return "the counts add up to " + std::to_string(total) + ", more than the " +
               std::to_string(n) + " bytes: " + kZeroedHint +
               ". Or were bytes counted twice, or read past the end of data (the harness keeps "
               "bytes 160..167 there)?";
    if (total != n)
        return "the counts add up to " + std::to_string(total) + ", but there are " +
               std::to_string(n) +
               " bytes: bytes were skipped or counted twice (the last n % 16 "
               "bytes? the grid-stride loop? the merge of the block counts? a race: a shared "
               "count bumped without atomicAdd, or read before the __syncthreads()?)";
    return "the counts add up to n, but bytes landed in the wrong bins: is every byte of a word "
           "taken with the right shift and mask?";
}

// `got` against the exact counts, with what the wrong ones suggest.
testing::AssertionResult counts_match(const std::vector<unsigned int>& got,
                                      const std::vector<std::uint64_t>& want, std::size_t n) {
    course::CompareOptions options{"bins"};
    options.diagnose = [&] { return diagnose(got, want, n); };
    return course::expect_close(got, want, course::Tolerance::exact(), options);
}

void check_histogram(const std::vector<std::uint8_t>& data) {
    const course::DeviceBuffer<std::uint8_t> d_data("data", data);
    course::DeviceBuffer<unsigned int> bins("bins", 256);  // holds the poison: not zeroed
    histogram_256(d_data.data(), data.size(), bins.data());
    EXPECT_TRUE(counts_match(bins.download(), course::reference::histogram_256(data), data.size()));
}

// 1: one byte; 31/33: around a warp; 255/256/257: around the bin count and a multiple of 16
// bytes (uint4); 65521: prime, n % 16 = 1; 2^24 + 3: many blocks, a tail of 3 bytes.
const std::size_t kSizes[] = {1, 31, 33, 255, 256, 257, 65521, (std::size_t{1} << 24) + 3};

TEST_F(Histogram, UniformBytes) {
    auto rng = test_rng();
    for (std::size_t n : kSizes) {
        SCOPED_TRACE("n = " + std::to_string(n) + ", uniform bytes");
        check_histogram(uniform_bytes(n, rng));
    }
}

TEST_F(Histogram, SkewedBytes) {
    auto rng = test_rng();
    for (std::size_t n : kSizes) {
        const auto common = static_cast<std::uint8_t>(rng.uniform_int(0, 255));
        SCOPED_TRACE("n = " + std::to_string(n) + ", 90% of the bytes are " +
                     std::to_string(common));
        check_histogram(skewed_bytes(n, common, rng));
    }
}

TEST_F(Histogram, OneValueRepeated) {
    auto rng = test_rng();
    for (std::size_t n : kSizes) {
        const auto value = static_cast<std::uint8_t>(rng.uniform_int(0, 255));
        SCOPED_TRACE("n = " + std::to_string(n) + ", every byte is " + std::to_string(value));
        check_histogram(std::vector<std::uint8_t>(n, value));
    }
}

// 2^28 bytes (256 MiB), far above any L2: timed against CUB on the same data.
void time_against_cub(const std::vector<std::uint8_t>& data, const std::string& label) {
    const std::size_t n = data.size();
    course::DeviceBuffer<std::uint8_t> d_data("data", data);
    course::DeviceBuffer<unsigned int> bins("bins", 256), cub_bins("cub_bins", 256);

    // Every byte of the second input set is the first's XOR 0x5A: still a byte, in another bin.
    const auto timing = course::time_against(
        [&] { histogram_256(d_data.data(), n, bins.data()); },
        [&] { course::baseline::cub_histogram_256(d_data.data(), n, cub_bins.data()); },
        {course::TimedOutput(bins)}, {course::TimedInput(d_data, std::uint8_t{0x5A})});

    EXPECT_TRUE(counts_match(bins.download(), course::reference::histogram_256(data), n));
    // Both read the n input bytes once (and write 256 counters).
    course::record_bandwidth(label, timing, static_cast<double>(n), "cub_histogram_256",
                             static_cast<double>(n));
}

constexpr std::size_t kTimedN = std::size_t{1} << 28;

TEST_F(Histogram, BandwidthUniform) {
    COURSE_REQUIRE_MEMORY(kTimedN + (256u << 20));
    auto rng = test_rng();
    time_against_cub(uniform_bytes(kTimedN, rng), "n=2^28 uniform");
}

TEST_F(Histogram, BandwidthOneValue) {
    // Every byte the same: the worst case for contention on one counter.
    COURSE_REQUIRE_MEMORY(kTimedN + (256u << 20));
    auto rng = test_rng();
    const auto value = static_cast<std::uint8_t>(rng.uniform_int(0, 255));
    time_against_cub(std::vector<std::uint8_t>(kTimedN, value), "n=2^28 one value");
}

TEST_F(Histogram, MoreThan2To31Bytes) {
    // 2^32 - 1 bytes (4.3 GB), the contract's largest: past 2^31, where a byte index held in an
    // int overflows, and up to where one held in an unsigned int does (a loop whose unsigned
    // index steps past 2^32 - 1 wraps and never ends); 15 bytes after the last uint4. The bytes
    // repeat every kPeriod (a prime): the counts are then (n / kPeriod) times a period's plus
    // those of the first n % kPeriod bytes of one.
    constexpr std::size_t kPeriod = 1000003;
    const std::size_t n = (std::size_t{1} << 32) - 1;
    COURSE_LARGE_CASE(n + (64u << 20));
    SCOPED_TRACE("n = 2^32 - 1, bytes made on the device, repeating every " +
                 std::to_string(kPeriod));
    auto rng = test_rng();
    const std::uint64_t seed = rng.next_u64();
    course::DeviceBuffer<std::uint8_t> d_data("data", n);
    course::fill_bytes(d_data.data(), n, seed, kPeriod);
    course::DeviceBuffer<unsigned int> bins("bins", 256);

    course::run_large_case([&] { histogram_256(d_data.data(), n, bins.data()); });

    std::vector<std::uint64_t> want(256, 0);
    for (std::size_t k = 0; k < kPeriod; ++k)
        want[course::hashed::byte(k, seed)] += n / kPeriod + (k < n % kPeriod ? 1 : 0);
    EXPECT_TRUE(counts_match(bins.download(), want, n));
}

}  // namespace
