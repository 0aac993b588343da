// main() of every checker: GoogleTest, plus one line naming the seed and the device, so that any
// log says how to replay it.
#include <gtest/gtest.h>

#include <cstdio>

#include "course/gpu.h"
#include "course/random.h"

int main(int argc, char** argv) {
    testing::InitGoogleTest(&argc, argv);
    const course::GpuInfo& gpu = course::gpu();
    std::printf("[course] seed %llu (replay: GRADER_SEED=%llu); device: %s\n",
                static_cast<unsigned long long>(course::run_seed()),
                static_cast<unsigned long long>(course::run_seed()),
                gpu.available ? (gpu.name + ", sm_" + std::to_string(gpu.sm)).c_str()
                              : gpu.unavailable_reason.c_str());
    return RUN_ALL_TESTS();
}
