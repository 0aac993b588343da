// The references of the large cases' windows (course/large.h).
#include "course/large.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace {

TEST(ElementByElement, GivesEachWindowItsElementsByIndexInTheWholeOutput) {
    const auto reference =
        course::element_by_element([](std::size_t index) { return 0.5 * index; });
    EXPECT_EQ(reference(course::Window{0, 3}), (std::vector<double>{0.0, 0.5, 1.0}));
    // Past 2^32: the index is not truncated to 32 bits.
    const std::size_t far = (std::size_t{1} << 32) + 7;
    EXPECT_EQ(reference(course::Window{far, 2}), (std::vector<double>{0.5 * far, 0.5 * (far + 1)}));
}

}  // namespace
