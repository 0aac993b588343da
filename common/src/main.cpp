// main() of every checker: GoogleTest, the report channel to the grader (report_channel.h), the
// harness's words for CUDA errors (error_notes.h), plus one line naming the seed and the device,
// so that any log says how to replay it.
#include <gtest/gtest.h>

#include <cstdio>

#include "course/gpu.h"
#include "course/random.h"
#include "error_notes.h"
#include "report_channel.h"

int main(int argc, char** argv) {
    course::report_channel::init_google_test(&argc, argv);
    course::install_error_notes();
    const course::GpuInfo& gpu = course::gpu();
    std::printf("[course] seed %llu (replay: GRADER_SEED=%llu); device: %s\n",
                static_cast<unsigned long long>(course::run_seed()),
                static_cast<unsigned long long>(course::run_seed()),
                gpu.available ? (gpu.name + ", sm_" + std::to_string(gpu.sm)).c_str()
                              : gpu.unavailable_reason.c_str());
    return RUN_ALL_TESTS();
}
