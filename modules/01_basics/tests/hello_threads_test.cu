// Checker of 01_basics/hello_threads: every element must hold its own index, written once, and
// nothing around the buffer may change. The sizes are chosen so that each classic indexing
// mistake leaves elements unwritten (reported as "never written") or writes outside the buffer
// (reported by the redzones): a partial last block, a non-square matrix for swapped x and y, and
// grids whose block count differs from the block size, for gridDim used in place of blockDim.
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

TEST_F(HelloThreads, GlobalIndex2d) {
    struct Shape {
        std::size_t rows, cols;
    };
    // 1 x 1: a single thread, every other one of its block must stay out; 37 x 70 and 70 x 37:
    // not square, so swapping x and y (or rows and cols) leaves elements unwritten; 31 x 33 and
    // 33 x 31: partial blocks on both edges; a single row and a single column; 1000 x 1009: many
    // blocks along both axes.
    for (const Shape shape : {Shape{1, 1}, Shape{37, 70}, Shape{70, 37}, Shape{31, 33},
                              Shape{33, 31}, Shape{1, 1000}, Shape{1000, 1}, Shape{1000, 1009}}) {
        SCOPED_TRACE("global_index_2d, rows = " + std::to_string(shape.rows) +
                     ", cols = " + std::to_string(shape.cols));
        course::DeviceBuffer<int> out("out", shape.rows * shape.cols);

        global_index_2d(out.data(), static_cast<int>(shape.rows), static_cast<int>(shape.cols));

        EXPECT_TRUE(course::expect_equal(out.download(), flat_indices(out.size()),
                                         {"out", course::Matrix{shape.rows, shape.cols}}));
    }
}

}  // namespace
