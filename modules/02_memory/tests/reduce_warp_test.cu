// Checker of 02_memory/reduce_warp: every block's partial, exactly, on small-integer inputs of
// the sizes around a warp, a float4 and a block's 4096-element slice (n not a multiple of 4, a
// short last slice, many blocks), then on random floats, then the bandwidth on 2^26 floats
// against a device-to-device copy timed in the same run, then beyond 2^31 elements (last:
// course/large.h). The cases live in partials_checks.cuh, shared with reduce_shared.
#include "partials_checks.cuh"
#include "reduce_warp.h"

namespace {

class ReduceWarp : public course::GpuTest {};

const partials_checks::Exercise kReduceWarp{reduce_warp, kReduceWarpItemsPerBlock};

TEST_F(ReduceWarp, EdgeSizesExact) {
    auto rng = test_rng();
    // 1, 2, 3, 5: less than or just over one float4; 31/33: around a warp; 1023/1025: around one
    // float4 per thread; 4095/4096/4097: around the slice; 65537: prime, 17 blocks; 2^24 + 3:
    // 4097 blocks (races show up) and a 3-element last slice that is not a whole float4.
    for (std::size_t n :
         {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{5}, std::size_t{31},
          std::size_t{33}, std::size_t{1023}, std::size_t{1025}, std::size_t{4095},
          std::size_t{4096}, std::size_t{4097}, std::size_t{65537}, (std::size_t{1} << 24) + 3}) {
        partials_checks::check_exact(kReduceWarp, n, rng);
    }
}

TEST_F(ReduceWarp, RandomFloats) {
    auto rng = test_rng();
    for (std::size_t n : {std::size_t{1000}, std::size_t{100003}, std::size_t{1} << 22}) {
        partials_checks::check_random(kReduceWarp, n, rng);
    }
}

TEST_F(ReduceWarp, Bandwidth) {
    auto rng = test_rng();
    partials_checks::time_bandwidth(kReduceWarp, rng);
}

TEST_F(ReduceWarp, IndexBeyondIntRange) {
    auto rng = test_rng();
    partials_checks::check_beyond_int_range(kReduceWarp, rng);
}

}  // namespace
