// Checker of 03_patterns/reduce_full: small-integer inputs whose float sum is exact (a skipped or
// doubled element shows), one-hot inputs at the first, last and block-boundary positions, random
// inputs with a tolerance derived from n, then the bandwidth against CUB (2^26 floats) and against
// a device copy (2^27 floats), then a sum of more than 2^31 elements (last: course/large.h).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/reduce.h"
#include "course/testing.h"
#include "reduce_full.h"

namespace {

class ReduceFull : public course::GpuTest {};

// reduce_full on `in` (already on the device), checking that nothing but the one output float
// was written. Returns that float.
float reduce_on_device(const course::DeviceBuffer<float>& in) {
    course::DeviceBuffer<float> out("out", 1);
    reduce_full(in.data(), in.size(), out.data());
    const float got = out.download()[0];
    return got;
}

// `diagnosis`: what a wrong sum of this case suggests, shown before the numbers.
testing::AssertionResult sum_matches(float got, double want, const course::Tolerance& tol,
                                     const std::string& diagnosis = "") {
    course::CompareOptions options{"out"};
    options.diagnose = [&] { return diagnosis; };
    return course::expect_close(std::vector<float>{got}, std::vector<double>{want}, tol, options);
}

// Nonzero integers in [-4, 4]: every partial sum of any order stays far below 2^24, so the float
// sum is exact, and a skipped or doubled element changes it.
std::vector<float> small_nonzero_integers(std::size_t n, course::Rng& rng) {
    std::vector<float> values(n);
    for (float& v : values) {
        const auto magnitude = static_cast<float>(rng.uniform_int(1, 4));
        v = rng.uniform_int(0, 1) ? magnitude : -magnitude;
    }
    return values;
}

// 1: one thread's work; 31/33: around a warp; 1023/1025: around a block of 1024 threads or a
// float4 per thread of a 256-thread block; 100003: prime (never a multiple of anything, n % 4 = 3);
// 2^24 + 3: many blocks, partials to combine, and a tail shorter than a float4.
const std::size_t kEdgeSizes[] = {1, 31, 33, 1023, 1025, 100003, (std::size_t{1} << 24) + 3};

TEST_F(ReduceFull, ExactSumsOfSmallIntegers) {
    auto rng = test_rng();
    for (std::size_t n : kEdgeSizes) {
        SCOPED_TRACE("n = " + std::to_string(n) + ", values are nonzero integers in [-4, 4]");
        const auto values = small_nonzero_integers(n, rng);
        const course::DeviceBuffer<float> in("in", values);
        EXPECT_TRUE(sum_matches(reduce_on_device(in), course::reference::sum(values),
                                course::Tolerance::exact(),
                                "the exact sum differs: some elements were skipped or added twice "
                                "(the tail? a block boundary? the partials of some blocks?)"));
    }
}

TEST_F(ReduceFull, OneHotAtBoundaries) {
    // 2^20 + 3: the last 3 floats do not fill a float4.
    const std::size_t n = (std::size_t{1} << 20) + 3;
    std::vector<float> values(n, 0.0f);
    course::DeviceBuffer<float> in("in", n);
    for (std::size_t position :
         {std::size_t{0}, std::size_t{1}, std::size_t{31}, std::size_t{32}, std::size_t{255},
          std::size_t{256}, std::size_t{1023}, std::size_t{1024}, std::size_t{2047},
          std::size_t{2048}, std::size_t{4095}, std::size_t{4096}, std::size_t{65536}, n / 2, n - 4,
          n - 3, n - 2, n - 1}) {
        SCOPED_TRACE("n = " + std::to_string(n) + ", in[" + std::to_string(position) +
                     "] = 1 and every other element 0");
        values[position] = 1.0f;
        in.upload(values);
        const float got = reduce_on_device(in);
        EXPECT_TRUE(sum_matches(got, 1.0, course::Tolerance::exact(),
                                "the sum of a one-hot input is 1: 0 means in[" +
                                    std::to_string(position) +
                                    "] was never added, 2 that it was added twice"));
        values[position] = 0.0f;
    }
}

TEST_F(ReduceFull, RandomFloats) {
    auto rng = test_rng();
    for (std::size_t n : kEdgeSizes) {
        SCOPED_TRACE("n = " + std::to_string(n) + ", values uniform in [-1, 1]");
        const auto values = course::random_floats(n, -1.0f, 1.0f, rng);
        const course::DeviceBuffer<float> in("in", values);
        EXPECT_TRUE(sum_matches(reduce_on_device(in), course::reference::sum(values),
                                course::Tolerance::float32(n, 1.0)));
    }
}

// The timed inputs are far above any L2, so they measure device memory: 2^26 floats (256 MiB)
// against CUB, 2^27 (512 MiB) against the copy. The copy case is larger because its fixed costs
// (a launch, writing back what the L2 flush left dirty) weigh twice as much next to a read-only
// kernel as next to the copy: at 2^27 they no longer hide how close to streaming speed it is.
constexpr std::size_t kCubN = std::size_t{1} << 26;
constexpr std::size_t kCopyN = std::size_t{1} << 27;

TEST_F(ReduceFull, BandwidthAgainstCub) {
    const std::size_t n = kCubN;
    COURSE_REQUIRE_MEMORY(n * sizeof(float) + (256u << 20));
    auto rng = test_rng();
    const auto values = course::random_floats(n, -1.0f, 1.0f, rng);
    course::DeviceBuffer<float> in("in", values);
    course::DeviceBuffer<float> out("out", 1), cub_out("cub_out", 1);
    const auto tolerance = course::Tolerance::float32(n, 1.0);

    const auto timing = course::time_against(
        [&] { reduce_full(in.data(), n, out.data()); },
        [&] { course::baseline::cub_reduce_sum(in.data(), cub_out.data(), n); },
        {course::TimedOutput(out, tolerance)}, {course::TimedInput(in)});

    // The timed output must be right too (after hundreds of calls: scratch reused correctly).
    EXPECT_TRUE(sum_matches(out.download()[0], course::reference::sum(values), tolerance));
    // Both read the 4n input bytes once (and write one float): bytes = 4n for both.
    course::record_bandwidth("n=2^26 vs CUB", timing, 4.0 * n, "cub_reduce_sum", 4.0 * n);
}

TEST_F(ReduceFull, BandwidthAgainstCopy) {
    const std::size_t n = kCopyN;
    COURSE_REQUIRE_MEMORY(2 * n * sizeof(float) + (256u << 20));
    auto rng = test_rng();
    const auto values = course::random_floats(n, -1.0f, 1.0f, rng);
    course::DeviceBuffer<float> in("in", values);
    course::DeviceBuffer<float> out("out", 1), copy("copy", n);
    const auto tolerance = course::Tolerance::float32(n, 1.0);

    const auto timing = course::time_against(
        [&] { reduce_full(in.data(), n, out.data()); },
        [&] { course::baseline::device_copy(copy.data(), in.data(), n * sizeof(float)); },
        {course::TimedOutput(out, tolerance)}, {course::TimedInput(in)});

    EXPECT_TRUE(sum_matches(out.download()[0], course::reference::sum(values), tolerance));
    // reduce_full reads 4n bytes; the copy reads 4n and writes 4n: each rate counts the bytes
    // that cross the memory bus, so the ratio says how close the sum comes to streaming speed.
    course::record_bandwidth("n=2^27 vs copy", timing, 4.0 * n, "copy", 2.0 * 4.0 * n);
}

// in[i] = 1 + (i >> 28): small integers, exact as floats, a different value in every 2^28-element
// stretch, so skipping the elements past 2^31 (32-bit indices) or wrapping back to the start
// changes the sum by far more than rounding can.
__global__ void fill_stretches(float* in, std::size_t n) {
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride)
        in[i] = static_cast<float>(1 + (i >> 28));
}

double sum_of_stretches(std::size_t n) {
    double total = 0.0;
    for (std::size_t start = 0; start < n; start += std::size_t{1} << 28) {
        const std::size_t count = std::min(n - start, std::size_t{1} << 28);
        total += static_cast<double>(count) * static_cast<double>(1 + (start >> 28));
    }
    return total;
}

TEST_F(ReduceFull, MoreThan2To31Elements) {
    // 2^31 + 2^28 + 5 floats (9.7 GB): indices past 2^31 - 1 do not fit in an int.
    const std::size_t n = (std::size_t{1} << 31) + (std::size_t{1} << 28) + 5;
    COURSE_LARGE_CASE(n * sizeof(float) + (64u << 20));
    SCOPED_TRACE("n = 2^31 + 2^28 + 5, in[i] = 1 + (i >> 28)");
    course::DeviceBuffer<float> in("in", n);
    fill_stretches<<<4096, 256>>>(in.data(), n);
    CUDA_CHECK_LAUNCH();
    course::DeviceBuffer<float> out("out", 1);
    course::run_large_case([&] { reduce_full(in.data(), n, out.data()); });
    // A float sum of 2.4e9 elements rounds: the tolerance grows with n, and the elements past
    // 2^31 (values 9 and 10) are 20% of the total, far outside it.
    EXPECT_TRUE(sum_matches(out.download()[0], sum_of_stretches(n),
                            course::Tolerance::float32(n, 10.0),
                            "wrong sum of more than 2^31 elements: an index computed in 32-bit "
                            "int arithmetic overflows at 2^31 (an unsigned one at 2^32): is every "
                            "index a std::size_t?"));
}

}  // namespace
