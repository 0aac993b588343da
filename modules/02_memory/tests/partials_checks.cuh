// Checks shared by the checkers of reduce_shared and reduce_warp. Both contracts have the same
// shape: block b writes partials[b], the sum of its slice in[b * slice, (b + 1) * slice) of
// `slice` consecutive elements, the last slice being shorter. Only the slice length differs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/block_sums.h"
#include "course/testing.h"

namespace partials_checks {

// The launcher under test and the slice its contract fixes.
struct Exercise {
    void (*reduce)(const float* in, std::size_t n, float* partials);
    std::size_t slice;
};

// A nonzero small integer, +-1 .. +-8, from 4 random bits. With such inputs every partial is an
// integer below 2^24 in magnitude, exact in float whatever the order of the additions, so the
// partials are compared exactly: an element skipped, added twice or read from the wrong place
// changes its partial by at least 1 (never by 0: no input is 0).
__host__ __device__ inline float small_nonzero_int(std::uint64_t bits) {
    const float magnitude = static_cast<float>(bits & 7) + 1.0f;
    return bits & 8 ? -magnitude : magnitude;
}

// The small integer of element i of an input made on the device (course/hashed.h).
__host__ __device__ inline float hashed_input(std::size_t i, std::uint64_t seed) {
    return small_nonzero_int(course::hashed::bits(i, seed));
}

// in[i] = hashed_input(i, seed): 8 GiB of input made in milliseconds instead of uploaded.
__global__ void fill_hashed_input(float* in, std::size_t n, std::uint64_t seed) {
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride)
        in[i] = hashed_input(i, seed);
}

// The reference for that input, one thread per slice, recomputing each element from its index
// (it never reads the buffer the code under test reads). Integer accumulation: exact.
__global__ void slice_sums_of_hashed_input(float* sums, std::size_t n, std::size_t slice,
                                           std::uint64_t seed) {
    const std::size_t b = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (b * slice >= n) return;
    const std::size_t end = (b + 1) * slice < n ? (b + 1) * slice : n;
    long long sum = 0;
    for (std::size_t i = b * slice; i < end; ++i)
        sum += static_cast<long long>(hashed_input(i, seed));
    sums[b] = static_cast<float>(sum);
}

// What the partials mean for this n, shown with every failure of the case.
inline std::string describe_case(std::size_t n, std::size_t slice) {
    const std::size_t count = course::ceil_div(n, slice);
    const std::size_t last = n - (count - 1) * slice;
    return "n = " + std::to_string(n) + ": partials[b] is the sum of in[b * " +
           std::to_string(slice) + ", (b + 1) * " + std::to_string(slice) + "); " +
           std::to_string(count) + " partials, the last over " + std::to_string(last) +
           (last == 1 ? " element" : " elements");
}

// Runs the launcher on `in` and compares every partial with the CPU reference.
inline void check_partials(const Exercise& ex, const std::vector<float>& in,
                           const course::Tolerance& tol) {
    const std::size_t n = in.size();
    SCOPED_TRACE(describe_case(n, ex.slice));
    course::DeviceBuffer<float> d_in("in", in);
    course::DeviceBuffer<float> d_partials("partials", course::ceil_div(n, ex.slice));

    ex.reduce(d_in.data(), n, d_partials.data());

    EXPECT_TRUE(course::expect_close(
        d_partials.download(), course::reference::block_sums(in, ex.slice), tol, {"partials"}));
}

// Small-integer inputs, compared exactly.
inline void check_exact(const Exercise& ex, std::size_t n, course::Rng& rng) {
    std::vector<float> in(n);
    for (float& v : in) v = small_nonzero_int(rng.next_u64());
    check_partials(ex, in, course::Tolerance::exact());
}

// Uniform floats in [-1, 1): float rounding, so the tolerance of a float32 sum of `slice` terms
// of typical magnitude 0.5 (the mean of |x|).
inline void check_random(const Exercise& ex, std::size_t n, course::Rng& rng) {
    check_partials(ex, course::random_floats(n, -1.0f, 1.0f, rng),
                   course::Tolerance::float32(ex.slice, 0.5));
}

// What wrong partials of the case past 2^31 elements suggest: when every partial whose slice lies
// below element 2^31 is right and the first wrong one's slice reaches past it, 32-bit indices.
inline std::string diagnose_beyond_int_range(const std::vector<float>& got,
                                             const std::vector<float>& want, std::size_t slice) {
    constexpr std::size_t kTwoTo31 = std::size_t{1} << 31;
    for (std::size_t b = 0; b < got.size(); ++b) {
        if (got[b] == want[b]) continue;
        if ((b + 1) * slice <= kTwoTo31) return "";
        return "every partial of a slice below element 2^31 = 2147483648 is right, and the first "
               "wrong one, partials[" +
               std::to_string(b) +
               "], sums the slice that reaches past "
               "it: an element index computed in 32-bit int arithmetic overflows at 2^31. "
               "Compute it in std::size_t (widen blockIdx.x before multiplying)";
    }
    return "";
}

// n just above 2^31 (8 GiB of floats): an element index held in an int overflows here (it goes
// negative: a crash or a wrong sum). The input is made on the device and the reference computed
// there from the same formula, which keeps the case to a fraction of a second.
inline void check_beyond_int_range(const Exercise& ex, course::Rng& rng) {
    // 2^31 + 4099: 4099 is not a multiple of 4, of 512 or of 4096, so the last slice is short.
    const std::size_t n = (std::size_t{1} << 31) + 4099;
    const std::size_t count = course::ceil_div(n, ex.slice);
    COURSE_LARGE_CASE(n * sizeof(float) + 2 * count * sizeof(float) + (64u << 20));
    SCOPED_TRACE(describe_case(n, ex.slice) + " (input: small integers made on the device)");
    const std::uint64_t seed = rng.next_u64();
    course::DeviceBuffer<float> d_in("in", n);
    course::DeviceBuffer<float> d_partials("partials", count), d_want("expected partials", count);
    fill_hashed_input<<<4 * 1024, 256>>>(d_in.data(), n, seed);
    CUDA_CHECK_LAUNCH();
    slice_sums_of_hashed_input<<<static_cast<unsigned>(course::ceil_div(count, 256)), 256>>>(
        d_want.data(), n, ex.slice, seed);
    CUDA_CHECK_LAUNCH();

    course::run_large_case([&] { ex.reduce(d_in.data(), n, d_partials.data()); });

    const auto got = d_partials.download(), want = d_want.download();
    course::CompareOptions options{"partials"};
    options.diagnose = [&] { return diagnose_beyond_int_range(got, want, ex.slice); };
    EXPECT_TRUE(course::expect_close(got, want, course::Tolerance::exact(), options));
}

// Bandwidth on 2^26 floats (256 MiB, far above any L2) against a device copy of the same input.
inline void time_bandwidth(const Exercise& ex, course::Rng& rng) {
    const std::size_t n = std::size_t{1} << 26;
    const std::size_t count = course::ceil_div(n, ex.slice);
    COURSE_REQUIRE_MEMORY(2 * n * sizeof(float) + (256u << 20));
    const auto in = course::random_floats(n, -1.0f, 1.0f, rng);
    course::DeviceBuffer<float> d_in("in", in), d_partials("partials", count), d_copy("copy", n);
    const auto tolerance = course::Tolerance::float32(ex.slice, 0.5);

    const auto timing = course::time_against(
        [&] { ex.reduce(d_in.data(), n, d_partials.data()); },
        [&] { course::baseline::device_copy(d_copy.data(), d_in.data(), n * sizeof(float)); },
        {course::TimedOutput(d_partials, tolerance)}, {course::TimedInput(d_in)});

    // The timed output must be right too.
    SCOPED_TRACE(describe_case(n, ex.slice));
    EXPECT_TRUE(course::expect_close(d_partials.download(),
                                     course::reference::block_sums(in, ex.slice), tolerance,
                                     {"partials"}));
    // The reduction reads the n floats once and writes `count` partials: 4 * (n + count) bytes.
    // The copy reads and writes 4n bytes each.
    course::record_bandwidth("n=2^26", timing, sizeof(float) * (n + count), "copy",
                             2.0 * sizeof(float) * n);
}

}  // namespace partials_checks
