#include "course/reference/block_sums.h"

#include <stdexcept>

namespace course::reference {

std::vector<double> block_sums(const std::vector<float>& in, std::size_t slice) {
    if (slice == 0) throw std::invalid_argument("block_sums: slice must be at least 1");
    std::vector<double> sums((in.size() + slice - 1) / slice, 0.0);
    for (std::size_t i = 0; i < in.size(); ++i) sums[i / slice] += in[i];
    return sums;
}

}  // namespace course::reference
