// Checker of 01_basics/hello_threads: every element must hold its own index, written once, and
// nothing around the buffer may change. The sizes are chosen so that each classic indexing
// mistake leaves elements unwritten (reported as "never written") or writes outside the buffer
// (reported by the redzones): a partial last block, a non-square matrix for swapped x and y, and
// grids whose block count differs from the block size, for gridDim used in place of blockDim.
// Last, the contract's extremes: 2^30 elements in 1D, 65535 rows in 2D and 65535 x 32767 =
// 2147385345 elements (just below 2^31, a byte offset far past it), compared in windows.
#include <cstddef>
#include <numeric>
#include <string>
#include <vector>

#include "course/testing.h"
#include "hello_threads.h"

namespace {

class HelloThreads : public course::GpuTest {};

// 0, 1, 2, ...: what a buffer of flat indices holds.
std::vector<int> flat_indices(std::size_t count) {
    std::vector<int> indices(count);
    std::iota(indices.begin(), indices.end(), 0);
    return indices;
}

TEST_F(HelloThreads, GlobalIndex1d) {
    // 1: one thread; 31, 33: around a warp; 256, 257: a block and one more element (a second
    // block with a single useful thread); 1009: prime, so the last block is partial and the grid
    // has more than one block; 2^20 + 7: thousands of blocks, so gridDim.x (4097) and blockDim.x
    // differ a lot.
    for (int n : {1, 31, 33, 256, 257, 1009, (1 << 20) + 7}) {
        SCOPED_TRACE("global_index_1d, n = " + std::to_string(n));
        course::DeviceBuffer<int> out("out", static_cast<std::size_t>(n));

        global_index_1d(out.data(), n);

        EXPECT_TRUE(course::expect_equal(out.download(), flat_indices(out.size()), {"out"}));
    }
}

struct Shape {
    std::size_t rows, cols;
};

TEST_F(HelloThreads, GlobalIndex2d) {
    // 1 x 1: a single thread, every other one of its block must stay out; 37 x 70 and 70 x 37:
    // not square, so swapping x and y (or rows and cols) leaves elements unwritten; 31 x 33 and
    // 33 x 31: partial blocks on both edges; a single row and a single column; 1000 x 1009: many
    // blocks along both axes; 65535 x 2 and 2 x 65535: the contract's largest rows and columns.
    for (const Shape shape :
         {Shape{1, 1}, Shape{37, 70}, Shape{70, 37}, Shape{31, 33}, Shape{33, 31}, Shape{1, 1000},
          Shape{1000, 1}, Shape{1000, 1009}, Shape{65535, 2}, Shape{2, 65535}}) {
        SCOPED_TRACE("global_index_2d, rows = " + std::to_string(shape.rows) +
                     ", cols = " + std::to_string(shape.cols));
        course::DeviceBuffer<int> out("out", shape.rows * shape.cols);

        global_index_2d(out.data(), static_cast<int>(shape.rows), static_cast<int>(shape.cols));

        EXPECT_TRUE(course::expect_equal(out.download(), flat_indices(out.size()),
                                         {"out", course::Matrix{shape.rows, shape.cols}}));
    }
}

// Windows of out (every element holds its own index) around 2^29, 2^30 and the ends.
testing::AssertionResult flat_windows(const course::DeviceBuffer<int>& out, course::Rng& rng) {
    const auto indices = [](const course::Window& w) {
        std::vector<int> values(w.count);
        std::iota(values.begin(), values.end(), static_cast<int>(w.first));
        return values;
    };
    return course::expect_windows_close(out, course::windows_past_int_range(out.size(), rng),
                                        indices, course::Tolerance::exact(), {"out"});
}

TEST_F(HelloThreads, GlobalIndex1dLargest) {
    // n = 2^30, the contract's largest: 4 GiB of ints, past 2^29 where a byte offset held in an
    // int wraps. Last, as every large case.
    const std::size_t n = std::size_t{1} << 30;
    COURSE_LARGE_CASE(n * sizeof(int) + (64u << 20));
    SCOPED_TRACE("global_index_1d, n = 2^30");
    auto rng = test_rng();
    course::DeviceBuffer<int> out("out", n);
    course::run_large_case([&] { global_index_1d(out.data(), static_cast<int>(n)); });
    EXPECT_TRUE(flat_windows(out, rng));
}

TEST_F(HelloThreads, GlobalIndex2dLargest) {
    // 65535 rows (the contract's largest) of 32767 columns: 2147385345 ints, past 2^30.
    const Shape shape{65535, 32767};
    COURSE_LARGE_CASE(shape.rows * shape.cols * sizeof(int) + (64u << 20));
    SCOPED_TRACE("global_index_2d, rows = 65535, cols = 32767");
    auto rng = test_rng();
    course::DeviceBuffer<int> out("out", shape.rows * shape.cols);
    course::run_large_case([&] {
        global_index_2d(out.data(), static_cast<int>(shape.rows), static_cast<int>(shape.cols));
    });
    EXPECT_TRUE(flat_windows(out, rng));
}

}  // namespace
