// The one include of a checker: GoogleTest, device buffers, seeded inputs (on the host, or hashed
// on the device), comparison, repeated runs (races), timing, the cases past 2^31 elements, and the
// fixture that skips with a reason when the GPU is missing or too old.
//
//   class VectorAdd : public course::GpuTest {};
//   TEST_F(VectorAdd, EdgeSizes) { auto rng = test_rng(); ... }
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "course/bench.h"
#include "course/buffer.h"
#include "course/check.h"
#include "course/compare.h"
#include "course/gpu.h"
#include "course/hashed.h"
#include "course/large.h"
#include "course/random.h"
#include "course/repeated_runs.h"

#ifndef COURSE_MIN_SM
#error \
    "COURSE_MIN_SM comes from the manifest's min_sm through course_exercise() (cmake/Course.cmake)"
#endif

#ifndef COURSE_MIN_GPUS
#define COURSE_MIN_GPUS 1  // the manifest's min_gpus (module 11's collectives need 2)
#endif

namespace course {

class GpuTest : public testing::Test {
  protected:
    void SetUp() override {
        RecordProperty("seed", std::to_string(run_seed()));
        auto reason = gpu_skip_reason(COURSE_MIN_SM);
        if (!reason) reason = gpu_count_skip_reason(COURSE_MIN_GPUS);
        if (reason) {
            RecordProperty("skip_reason", *reason);
            GTEST_SKIP() << *reason;
        }
    }
    // This test's own input stream (independent of which other tests run).
    static Rng test_rng() {
        const auto* info = testing::UnitTest::GetInstance()->current_test_info();
        return rng_for(std::string(info->test_suite_name()) + "." + info->name());
    }
};

}  // namespace course

// Skips the current test, with the reason recorded for the grader, when the device lacks `bytes`
// of free memory (large cases on small GPUs).
#define COURSE_REQUIRE_MEMORY(bytes)                                        \
    do {                                                                    \
        if (auto course_reason = ::course::memory_skip_reason(bytes)) {     \
            ::testing::Test::RecordProperty("skip_reason", *course_reason); \
            GTEST_SKIP() << *course_reason;                                 \
        }                                                                   \
    } while (0)

// Skips the current test on the CPU emulator (dev/emu), with the reason, for a case that takes
// seconds on a GPU and would take minutes there (`what` names it).
#define COURSE_SKIP_ON_EMULATOR(what)                                                      \
    do {                                                                                   \
        if (::course::emulated()) {                                                        \
            const std::string course_reason =                                              \
                std::string(what) + ": minutes on the CPU emulator, run on a GPU instead"; \
            ::testing::Test::RecordProperty("skip_reason", course_reason);                 \
            GTEST_SKIP() << course_reason;                                                 \
        }                                                                                  \
    } while (0)
