#pragma once
#include <type_traits>
#include "emu.h"
namespace course {
template <class A, class B>
constexpr std::common_type_t<A, B> ceil_div(A count, B per_block) {
    using T = std::common_type_t<A, B>;
    return (static_cast<T>(count) + static_cast<T>(per_block) - 1) / static_cast<T>(per_block);
}
}  // namespace course
#define CUDA_CHECK(expression) (void)(expression)
#define CUDA_CHECK_LAUNCH() (void)0
