// Checker of 01_basics/vector_add: edge sizes first (a tail, a prime, one element), then the
// bandwidth on 2^25 elements against a device-to-device copy timed in the same run (every timed
// call's output checked); then the optional bf16 entry point (vector_add_bf16.h), where the file
// defines it: sizes around the 16-byte pack, each view one element off a 16-byte boundary, and
// its bandwidth on 2^26 elements (its limit); then more than 2^31 elements (64-bit indices; last,
// as every large case: course/large.h).
#include <string>
#include <tuple>
#include <vector>

#include "course/baselines.h"
#include "course/entry_point.h"
#include "course/testing.h"
#include "course/view.h"
#include "vector_add.h"
#include "vector_add_bf16.h"

// Weak: a file without the optional entry point still links (course/entry_point.h).
__attribute__((weak)) decltype(vector_add_bf16) vector_add_bf16;

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

// ---- vector_add_bf16 (vector_add_bf16.h), the trainer's residual add: where the file defines it

using bf16 = __nv_bfloat16;

// a + b in float, rounded to bf16 once: exactly what the kernel must store.
std::vector<float> add_bf16_on_host(const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> c(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) c[i] = course::round_to_bf16(a[i] + b[i]);
    return c;
}

std::vector<float> random_bf16(std::size_t n, course::Rng& rng) {
    auto values = course::random_floats(n, -1.0f, 1.0f, rng);
    for (float& v : values) v = course::round_to_bf16(v);
    return values;
}

// n elements, a, b and c each `offset` elements (2 bytes each) past a 16-byte boundary.
void check_bf16(std::size_t n, std::size_t a_offset, std::size_t b_offset, std::size_t c_offset,
                course::Rng& rng) {
    SCOPED_TRACE("vector_add_bf16, n = " + std::to_string(n) + ", views starting (a, b, c) " +
                 std::to_string(a_offset) + ", " + std::to_string(b_offset) + ", " +
                 std::to_string(c_offset) + " elements past a 16-byte boundary");
    const auto a = random_bf16(n, rng), b = random_bf16(n, rng);
    course::View<bf16> d_a("a", a, a_offset), d_b("b", b, b_offset), d_c("c", n, c_offset);

    vector_add_bf16(d_a.data(), d_b.data(), d_c.data(), n);

    EXPECT_TRUE(course::expect_close(d_c.values(), add_bf16_on_host(a, b),
                                     course::Tolerance::exact(), {"c"}));
    EXPECT_TRUE(d_c.front_untouched());
}

TEST_F(VectorAdd, Bf16EdgeSizesAndViews) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(vector_add_bf16);
    auto rng = test_rng();
    // 1, 7, 9, 1009: not a multiple of the 8-value pack; 8, 1024: whole packs, ending where
    // unmapped memory begins (a load one pack past the end faults); 2^20 + 3: many blocks, a tail.
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9},
                          std::size_t{1009}, std::size_t{1024}, (std::size_t{1} << 20) + 3})
        check_bf16(n, 0, 0, 0, rng);
    // One view at a time one element off, then all three: the 16-byte path must be chosen from
    // every pointer's alignment.
    for (const auto& [a, b, c] :
         {std::tuple{1, 0, 0}, std::tuple{0, 1, 0}, std::tuple{0, 0, 1}, std::tuple{1, 1, 1}})
        check_bf16(1024, a, b, c, rng);
}

TEST_F(VectorAdd, Bf16Bandwidth) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(vector_add_bf16);
    // 2^26 bf16 values per array (the contract's limit): 128 MiB each, as the float case's.
    const std::size_t n = std::size_t{1} << 26;
    COURSE_REQUIRE_MEMORY(6 * n * 2 + (256u << 20));
    auto rng = test_rng();
    const auto a = random_bf16(n, rng), b = random_bf16(n, rng);
    course::View<bf16> d_a("a", a, 0), d_b("b", b, 0), d_c("c", n, 0);
    course::DeviceBuffer<std::uint16_t> d_copy("copy", n);

    const auto timing = course::time_against(
        [&] { vector_add_bf16(d_a.data(), d_b.data(), d_c.data(), n); },
        [&] { course::baseline::device_copy(d_copy.data(), d_a.buffer().data(), n * 2); },
        {course::TimedOutput(d_c.buffer())}, {course::sign_flipped(d_a.buffer())});

    EXPECT_TRUE(course::expect_close(d_c.values(), add_bf16_on_host(a, b),
                                     course::Tolerance::exact(), {"c"}));
    // vector_add_bf16 reads a and b and writes c: 3 * 2n bytes. The copy reads and writes 2n
    // each.
    course::record_bandwidth("n=2^26 bf16", timing, 3.0 * 2 * n, "copy", 2.0 * 2 * n);
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
