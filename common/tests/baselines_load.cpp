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

TEST(Baselines, SayWhetherTheyHaveNccl) {
    // Answered without a GPU: whether the configure found NCCL (common/CMakeLists.txt), which
    // module 11's timed case needs.
    EXPECT_EQ(course::baseline::nccl_available(), COURSE_HAVE_NCCL == 1);
}

TEST(Baselines, TheTableEndsWithTheFp16Attention) {
    // The table's last entries: its layout matches the header's.
    ASSERT_NE(course::baseline::loaded().table, nullptr) << course::baseline::loaded().why;
    EXPECT_NE(course::baseline::loaded().table->cub_segmented_sort_descending, nullptr);
    EXPECT_NE(course::baseline::loaded().table->cudnn_attention_backward_fp16, nullptr);
}

}  // namespace
