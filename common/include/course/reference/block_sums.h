// CPU reference for reductions that write one partial sum per block, accumulated in double.
#pragma once

#include <cstddef>
#include <vector>

namespace course::reference {

// The sum of each consecutive slice of `slice` elements of `in`: element b is the sum of
// in[b * slice, min((b + 1) * slice, n)), so there are ceil(n / slice) sums and the last one
// covers what is left (fewer than `slice` elements when n is not a multiple of it).
std::vector<double> block_sums(const std::vector<float>& in, std::size_t slice);

}  // namespace course::reference
