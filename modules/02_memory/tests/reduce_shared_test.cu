// Checker of 02_memory/reduce_shared: every block's partial, exactly, on small-integer inputs of
// the sizes around a block's 512-element slice (a short last slice, one element, many blocks),
// then on random floats, then the bandwidth on 2^26 floats against a device-to-device copy timed
// in the same run, then beyond 2^31 elements (last: course/large.h). The cases live in
// partials_checks.cuh, shared with reduce_warp.
#include "partials_checks.cuh"
#include "reduce_shared.h"

namespace {

class ReduceShared : public course::GpuTest {};

const partials_checks::Exercise kReduceShared{reduce_shared, kReduceSharedItemsPerBlock};

TEST_F(ReduceShared, EdgeSizesExact) {
    auto rng = test_rng();
    // 1: one thread has work; 31/33: around a warp; 255/257: around the block, so the second
    // load of each thread matters; 511/512/513: around the slice; 1009: prime; 2^24 + 3: 32769
    // blocks (races show up) and a 3-element last slice.
    for (std::size_t n : {std::size_t{1}, std::size_t{31}, std::size_t{33}, std::size_t{255},
                          std::size_t{257}, std::size_t{511}, std::size_t{512}, std::size_t{513},
                          std::size_t{1009}, (std::size_t{1} << 24) + 3}) {
        partials_checks::check_exact(kReduceShared, n, rng);
    }
}

TEST_F(ReduceShared, RandomFloats) {
    auto rng = test_rng();
    for (std::size_t n : {std::size_t{1000}, std::size_t{100003}, std::size_t{1} << 22}) {
        partials_checks::check_random(kReduceShared, n, rng);
    }
}

TEST_F(ReduceShared, Bandwidth) {
    auto rng = test_rng();
    partials_checks::time_bandwidth(kReduceShared, rng);
}

TEST_F(ReduceShared, IndexBeyondIntRange) {
    auto rng = test_rng();
    partials_checks::check_beyond_int_range(kReduceShared, rng);
}

}  // namespace
