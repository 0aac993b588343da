// The same call repeated on the same inputs: a kernel without a race writes the same bits every
// run (its sums in a fixed order), one whose threads race need not. A checker that compares the
// runs' bits can say "a race" where a comparison with the reference only says "wrong".
//
//   const auto runs = course::outputs_of_runs(d_C, 3, [&] { gemm(..., d_C.data()); });
//   if (course::differing_elements(runs) > 0) ...  // a race
#pragma once

#include <cstddef>
#include <cstring>
#include <vector>

#include "course/buffer.h"

namespace course {

// What `out` holds after each of `runs` calls of `call`, `out` poisoned before each (so that an
// element a run leaves unwritten cannot keep the previous run's value).
template <class T, class Call>
std::vector<std::vector<T>> outputs_of_runs(DeviceBuffer<T>& out, int runs, Call call) {
    std::vector<std::vector<T>> outputs;
    for (int run = 0; run < runs; ++run) {
        out.poison();
        call();
        outputs.push_back(out.download());
    }
    return outputs;
}

// The elements that are not the same bits in all of `runs` (bits, not values: NaN == NaN here,
// and -0 != +0).
template <class T>
std::size_t differing_elements(const std::vector<std::vector<T>>& runs) {
    std::size_t differing = 0;
    for (std::size_t i = 0; i < runs.front().size(); ++i) {
        for (const auto& other : runs) {
            if (std::memcmp(&runs.front()[i], &other[i], sizeof(T)) != 0) {
                ++differing;
                break;
            }
        }
    }
    return differing;
}

}  // namespace course
