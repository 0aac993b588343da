// Checker of 03_patterns/scan: random inputs of sizes around every likely tile size (powers of
// two and their neighbours), an all-ones input (out[i] = i + 1, so a missing carry reads as the
// tile size), repeated calls on the same scratch, then the bandwidth on 2^26 ints against CUB,
// then more than 2^31 elements.
#include <cstdint>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/reduce.h"
#include "course/testing.h"
#include "scan.h"

namespace {

class Scan : public course::GpuTest {};

// The checker does not know your tile size, but the first wrong index usually gives it away.
std::string first_wrong(const std::vector<int>& got, const std::vector<std::int64_t>& want) {
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (got[i] == want[i]) continue;
        return "the first wrong element is out[" + std::to_string(i) + "] (got " +
               std::to_string(got[i]) + ", want " + std::to_string(want[i]) +
               "; every element before it is right). If " + std::to_string(i) +
               " is a multiple of your tile size, the sum carried in from the earlier tiles is "
               "missing or wrong from that tile on; otherwise look inside the tile (the carry "
               "between warps or threads).";
    }
    return "";
}

// `got` against `want`, with where the first wrong element lies.
testing::AssertionResult scans_match(const std::vector<int>& got,
                                     const std::vector<std::int64_t>& want) {
    course::CompareOptions options{"out"};
    options.diagnose = [&] { return first_wrong(got, want); };
    return course::expect_close(got, want, course::Tolerance::exact(), options);
}

// One call on fresh buffers; the same scratch as every other call of the process.
void check_scan(const std::vector<int>& values) {
    const std::size_t n = values.size();
    const course::DeviceBuffer<int> in("in", values);
    course::DeviceBuffer<int> out("out", n);
    scan(in.data(), out.data(), n);
    EXPECT_TRUE(scans_match(out.download(), course::reference::inclusive_scan(values)));
}

TEST_F(Scan, RandomSizes) {
    auto rng = test_rng();
    // 1: one element; 31/33: around a warp; m - 1, m, m + 1 around the usual tile sizes m (1024 ..
    // 16384 elements): a first tile alone, exactly full tiles, one more element in a new tile;
    // 65537 and the prime 1000003: many tiles; 2^24 + 3: thousands of tiles, long look-backs, and a
    // last tile of a few elements.
    for (std::size_t n : {std::size_t{1},     std::size_t{31},      std::size_t{33},
                          std::size_t{1023},  std::size_t{1024},    std::size_t{1025},
                          std::size_t{4095},  std::size_t{4096},    std::size_t{4097},
                          std::size_t{8191},  std::size_t{8192},    std::size_t{8193},
                          std::size_t{12287}, std::size_t{12288},   std::size_t{12289},
                          std::size_t{16383}, std::size_t{16384},   std::size_t{16385},
                          std::size_t{65537}, std::size_t{1000003}, (std::size_t{1} << 24) + 3}) {
        SCOPED_TRACE("n = " + std::to_string(n) + ", values uniform in [-8, 8]");
        check_scan(course::random_ints(n, -8, 8, rng));
    }
}

TEST_F(Scan, AllOnes) {
    // out[i] = i + 1: where the carry between tiles is lost, got = want - (start of the tile).
    const std::size_t n = (std::size_t{1} << 20) + 7;
    SCOPED_TRACE("n = 2^20 + 7, every element 1");
    check_scan(std::vector<int>(n, 1));
}

TEST_F(Scan, RepeatedCallsReuseTheScratch) {
    // Tile counters or statuses left over from the call before must not leak into this one:
    // the same size twice, a smaller one, then a larger one.
    auto rng = test_rng();
    for (std::size_t n : {std::size_t{3} << 20, std::size_t{3} << 20, std::size_t{12345},
                          (std::size_t{5} << 20) + 1}) {
        SCOPED_TRACE("n = " + std::to_string(n) + ", another call on the same scratch");
        check_scan(course::random_ints(n, -8, 8, rng));
    }
}

TEST_F(Scan, BandwidthAgainstCub) {
    // 2^26 ints: in, out, CUB's output and the harness's two copies of out are 256 MiB each, far
    // above any L2.
    const std::size_t n = std::size_t{1} << 26;
    COURSE_REQUIRE_MEMORY(5 * n * sizeof(int) + (256u << 20));
    auto rng = test_rng();
    const auto values = course::random_ints(n, -8, 8, rng);
    course::DeviceBuffer<int> in("in", values);
    course::DeviceBuffer<int> out("out", n), cub_out("cub_out", n);

    // The second input set: every value XOR 1 (one apart: the sums stay far inside an int).
    const auto timing = course::time_against(
        [&] { scan(in.data(), out.data(), n); },
        [&] { course::baseline::cub_inclusive_scan(in.data(), cub_out.data(), n); },
        {course::TimedOutput(out)}, {course::TimedInput(in, 1)});

    EXPECT_TRUE(scans_match(out.download(), course::reference::inclusive_scan(values)));
    // Both read 4n bytes and write 4n (the tile statuses are a few hundred KiB more).
    course::record_bandwidth("n=2^26", timing, 8.0 * n, "cub_inclusive_scan", 8.0 * n);
}

TEST_F(Scan, MoreThan2To31Elements) {
    // 2^31 + 2^20 + 5 ints (8.6 GB each for in and out): tiles past element 2^31, where an index
    // held in an int overflows. The input repeats every kPeriod elements (a prime, so it never
    // lines up with a tile), which makes out[i] = (i / kPeriod) * (sum of a period) + (prefix of
    // i % kPeriod within a period): one period's work on the host for any window.
    constexpr std::size_t kPeriod = 1000003;
    const std::size_t n = (std::size_t{1} << 31) + (std::size_t{1} << 20) + 5;
    COURSE_LARGE_CASE(2 * n * sizeof(int) + (64u << 20));
    SCOPED_TRACE("n = 2^31 + 2^20 + 5, values in [-8, 8] made on the device, repeating every " +
                 std::to_string(kPeriod));
    auto rng = test_rng();
    const std::uint64_t seed = rng.next_u64();
    course::DeviceBuffer<int> in("in", n), out("out", n);
    course::fill_uniform_int(in.data(), n, seed, -8, 8, kPeriod);
    std::vector<std::int64_t> period_prefix(kPeriod);
    std::int64_t sum = 0;
    for (std::size_t k = 0; k < kPeriod; ++k)
        period_prefix[k] = sum += course::hashed::uniform_int(k, seed, -8, 8);

    course::run_large_case([&] { scan(in.data(), out.data(), n); });

    const auto scanned = [&](const course::Window& w) {
        std::vector<std::int64_t> want(w.count);
        for (std::size_t k = 0; k < w.count; ++k) {
            const std::size_t i = w.first + k;
            want[k] = static_cast<std::int64_t>(i / kPeriod) * period_prefix.back() +
                      period_prefix[i % kPeriod];
        }
        return want;
    };
    EXPECT_TRUE(course::expect_windows_close(out, course::windows_past_int_range(n, rng), scanned,
                                             course::Tolerance::exact(), {"out"}));
}

}  // namespace
