// Checker of 01_basics/vector_add: edge sizes first (a tail, a prime, one element), then the
// bandwidth on 2^25 elements against a device-to-device copy timed in the same run (every timed
// call's output checked), then more than 2^31 elements (64-bit indices; last, as every large
// case: course/large.h).
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/testing.h"
#include "vector_add.h"

namespace {

class VectorAdd : public course::GpuTest {};

std::vector<float> add_on_host(const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> c(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) c[i] = a[i] + b[i];  // one rounding, as on the GPU
    return c;
}

void check_size(std::size_t n, course::Rng& rng) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto a = course::random_floats(n, -1.0f, 1.0f, rng);
    const auto b = course::random_floats(n, -1.0f, 1.0f, rng);
    course::DeviceBuffer<float> d_a("a", a), d_b("b", b), d_c("c", n);

    vector_add(d_a.data(), d_b.data(), d_c.data(), n);

    EXPECT_TRUE(course::expect_close(d_c.download(), add_on_host(a, b),
                                     course::Tolerance::float32(), {"c"}));
}

TEST_F(VectorAdd, EdgeSizes) {
    auto rng = test_rng();
    // 1: a single thread's work; 31/33: around a warp; 1009: prime, so never a multiple of the
    // block; 1024: a and b end exactly where unmapped memory begins (a load one past the end
    // faults: the other sizes end inside the last 16 bytes, which hold NaN); 2^24 + 3: many
    // blocks and a 3-element tail.
    for (std::size_t n : {std::size_t{1}, std::size_t{31}, std::size_t{33}, std::size_t{1009},
                          std::size_t{1024}, (std::size_t{1} << 24) + 3}) {
        check_size(n, rng);
    }
}

TEST_F(VectorAdd, Bandwidth) {
    // 2^25 floats per array: a, b, c and the copy's destination are 128 MiB each (512 MiB in
    // all, and the harness's two copies of c to check every timed call against, one per input
    // set), far above any L2, so this measures device memory.
    const std::size_t n = std::size_t{1} << 25;
    COURSE_REQUIRE_MEMORY(6 * n * sizeof(float) + (256u << 20));
    auto rng = test_rng();
    const auto a = course::random_floats(n, -1.0f, 1.0f, rng);
    const auto b = course::random_floats(n, -1.0f, 1.0f, rng);
    course::DeviceBuffer<float> d_a("a", a), d_b("b", b), d_c("c", n), d_copy("copy", n);

    const auto timing = course::time_against(
        [&] { vector_add(d_a.data(), d_b.data(), d_c.data(), n); },
        [&] { course::baseline::device_copy(d_copy.data(), d_a.data(), n * sizeof(float)); },
        {course::TimedOutput(d_c, course::Tolerance::float32())}, {course::TimedInput(d_a)});

    // The timed output must be right too.
    EXPECT_TRUE(course::expect_close(d_c.download(), add_on_host(a, b),
                                     course::Tolerance::float32(), {"c"}));
    // vector_add reads a and b and writes c: 3 * 4n bytes. The copy reads and writes 4n each.
    course::record_bandwidth("n=2^25", timing, 3.0 * sizeof(float) * n, "copy",
                             2.0 * sizeof(float) * n);
}

TEST_F(VectorAdd, MoreThan2To31Elements) {
    // 2^31 + 2^20 + 3 floats per array (8.6 GB each): an index held in an int overflows at
    // 2^31. The inputs are made on the device; the output is compared in windows around 2^31
    // and the ends, against sums the host recomputes from the same formula.
    const std::size_t n = (std::size_t{1} << 31) + (std::size_t{1} << 20) + 3;
    COURSE_LARGE_CASE(3 * n * sizeof(float) + (64u << 20));
    SCOPED_TRACE("n = 2^31 + 2^20 + 3, inputs made on the device");
    auto rng = test_rng();
    const std::uint64_t seed_a = rng.next_u64(), seed_b = rng.next_u64();
    course::DeviceBuffer<float> d_a("a", n), d_b("b", n), d_c("c", n);
    course::fill_uniform(d_a.data(), n, seed_a, -1.0f, 1.0f);
    course::fill_uniform(d_b.data(), n, seed_b, -1.0f, 1.0f);

    course::run_large_case([&] { vector_add(d_a.data(), d_b.data(), d_c.data(), n); });

    const auto sums = [&](const course::Window& w) {
        std::vector<float> c(w.count);
        for (std::size_t k = 0; k < w.count; ++k)
            c[k] = course::hashed::uniform(w.first + k, seed_a, -1.0f, 1.0f) +
                   course::hashed::uniform(w.first + k, seed_b, -1.0f, 1.0f);
        return c;
    };
    EXPECT_TRUE(course::expect_windows_close(d_c, course::windows_past_int_range(n, rng), sums,
                                             course::Tolerance::float32(), {"c"}));
}

}  // namespace
