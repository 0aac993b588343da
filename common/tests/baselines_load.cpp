// The baselines library loads the way every checker loads it (course/baselines.h: dlopen from
// the path CMake compiles in, then its table), on any machine: no GPU needed to find it.
#include "course/baselines.h"

#include <gtest/gtest.h>

namespace {

TEST(Baselines, TheLibraryAndItsTableLoad) {
    // Without a GPU (or without cuDNN) this is false, but answering it loaded the library.
    (void)course::baseline::cudnn_available();
    ASSERT_NE(course::baseline::loaded().table, nullptr) << course::baseline::loaded().why;
    EXPECT_NE(course::baseline::loaded().table->cublas_sgemm, nullptr);
}

}  // namespace
