// Checker of 03_patterns/scan_block: random tiles of every shape (a single element, around a
// warp, around the tile, many tiles with a partial last one), an all-ones input whose answer is
// easy to read, then the bandwidth on 2^26 ints next to a device copy (reported, no target),
// then more than 2^31 elements.
#include <cstdint>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/reduce.h"
#include "course/testing.h"
#include "scan_block.h"

namespace {

class ScanBlock : public course::GpuTest {};

// Where the first wrong element lies in tile terms, and what that position suggests.
std::string first_wrong_in_tiles(const std::vector<int>& got,
                                 const std::vector<std::int64_t>& want) {
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (got[i] == want[i]) continue;
        const std::size_t tile = i / kScanBlockTile, offset = i % kScanBlockTile;
        std::string text = "the first wrong element is out[" + std::to_string(i) + "]: tile " +
                           std::to_string(tile) + ", offset " + std::to_string(offset) +
                           " in the tile (every element before it is right)";
        if (offset == 0 && tile > 0)
            text +=
                "; a tile's first element is out[t] = in[t]: does each tile start from "
                "zero, with nothing carried over from the tile before?";
        else if (offset % 32 == 0 && offset > 0)
            text += "; offset " + std::to_string(offset) +
                    " is a multiple of 32: is the sum of "
                    "the earlier warps (or threads) added, after a __syncthreads()?";
        return text;
    }
    return "";
}

// `got` against `want`, with where the first wrong element lies in tile terms.
testing::AssertionResult scans_match(const std::vector<int>& got,
                                     const std::vector<std::int64_t>& want) {
    course::CompareOptions options{"out"};
    options.diagnose = [&] { return first_wrong_in_tiles(got, want); };
    return course::expect_close(got, want, course::Tolerance::exact(), options);
}

void check_scan_block(const std::vector<int>& values) {
    const std::size_t n = values.size();
    const course::DeviceBuffer<int> in("in", values);
    course::DeviceBuffer<int> out("out", n);
    scan_block(in.data(), out.data(), n);
    EXPECT_TRUE(scans_match(out.download(),
                            course::reference::inclusive_scan_per_tile(values, kScanBlockTile)));
}

TEST_F(ScanBlock, RandomTiles) {
    auto rng = test_rng();
    // 1: a tile of one; 31/33: around a warp; 1023/1024/1025: around one tile; 2047: a full
    // tile and a nearly full one; 10007: prime, 10 tiles and a partial one of 791; 2^24 + 3:
    // 16384 tiles and a partial one of 3.
    for (std::size_t n :
         {std::size_t{1}, std::size_t{31}, std::size_t{33}, std::size_t{1023}, std::size_t{1024},
          std::size_t{1025}, std::size_t{2047}, std::size_t{10007}, (std::size_t{1} << 24) + 3}) {
        SCOPED_TRACE("n = " + std::to_string(n) + ", values uniform in [-1000, 1000]");
        check_scan_block(course::random_ints(n, -1000, 1000, rng));
    }
}

TEST_F(ScanBlock, AllOnes) {
    // out[i] = i % 1024 + 1: a wrong value says by how much it is off.
    const std::size_t n = 5 * kScanBlockTile + 77;
    SCOPED_TRACE("n = " + std::to_string(n) + ", every element 1");
    check_scan_block(std::vector<int>(n, 1));
}

TEST_F(ScanBlock, BandwidthAgainstCopy) {
    // 2^26 ints: in, out, the copy's destination and the harness's two copies of out are 256
    // MiB each, far above any L2.
    const std::size_t n = std::size_t{1} << 26;
    COURSE_REQUIRE_MEMORY(5 * n * sizeof(int) + (256u << 20));
    auto rng = test_rng();
    const auto values = course::random_ints(n, -1000, 1000, rng);
    course::DeviceBuffer<int> in("in", values);
    course::DeviceBuffer<int> out("out", n), copy("copy", n);

    // The second input set: every value XOR 1 (one apart, as small as the first set's).
    const auto timing = course::time_against(
        [&] { scan_block(in.data(), out.data(), n); },
        [&] { course::baseline::device_copy(copy.data(), in.data(), n * sizeof(int)); },
        {course::TimedOutput(out)}, {course::TimedInput(in, 1)});

    EXPECT_TRUE(scans_match(out.download(),
                            course::reference::inclusive_scan_per_tile(values, kScanBlockTile)));
    // scan_block reads 4n bytes and writes 4n; the copy reads 4n and writes 4n.
    course::record_bandwidth("n=2^26", timing, 8.0 * n, "copy", 8.0 * n);
}

TEST_F(ScanBlock, MoreThan2To31Elements) {
    // 2^31 + 2^20 + 5 ints (8.6 GB each for in and out): tiles past element 2^31, where an index
    // held in an int overflows, and a last tile of 5. The input is made on the device; the
    // output is compared in windows around 2^31 and the ends, each recomputed from the start of
    // its tile.
    const std::size_t n = (std::size_t{1} << 31) + (std::size_t{1} << 20) + 5;
    COURSE_LARGE_CASE(2 * n * sizeof(int) + (64u << 20));
    SCOPED_TRACE("n = 2^31 + 2^20 + 5, values in [-1000, 1000] made on the device");
    auto rng = test_rng();
    const std::uint64_t seed = rng.next_u64();
    course::DeviceBuffer<int> in("in", n), out("out", n);
    course::fill_uniform_int(in.data(), n, seed, -1000, 1000);

    course::run_large_case([&] { scan_block(in.data(), out.data(), n); });

    const auto scanned = [&](const course::Window& w) {
        std::vector<std::int64_t> want(w.count);
        std::int64_t sum = 0;
        for (std::size_t i = w.first - w.first % kScanBlockTile; i < w.first + w.count; ++i) {
            if (i % kScanBlockTile == 0) sum = 0;
            sum += course::hashed::uniform_int(i, seed, -1000, 1000);
            if (i >= w.first) want[i - w.first] = sum;
        }
        return want;
    };
    EXPECT_TRUE(course::expect_windows_close(out, course::windows_past_int_range(n, rng), scanned,
                                             course::Tolerance::exact(), {"out"}));
}

}  // namespace
