#include "course/reference/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace course::reference {

std::vector<double> softmax_row(const float* row, std::size_t cols, double scale) {
    std::vector<double> out(cols);
    double max = -std::numeric_limits<double>::infinity();
    for (std::size_t c = 0; c < cols; ++c) max = std::max(max, scale * row[c]);
    double sum = 0.0;
    for (std::size_t c = 0; c < cols; ++c) {
        out[c] = std::exp(scale * row[c] - max);  // exp(-inf) = 0: masked entries drop out
        sum += out[c];
    }
    for (double& value : out) value /= sum;
    return out;
}

std::vector<double> softmax_rows(const std::vector<float>& in, std::size_t rows, std::size_t cols) {
    std::vector<double> out;
    out.reserve(rows * cols);
    for (std::size_t r = 0; r < rows; ++r) {
        const auto row = softmax_row(in.data() + r * cols, cols);
        out.insert(out.end(), row.begin(), row.end());
    }
    return out;
}

std::vector<double> softmax_causal_row(const float* row, std::size_t i, std::size_t T, double scale) {
    std::vector<double> out = softmax_row(row, i + 1, scale);
    out.resize(T, 0.0);
    return out;
}

std::vector<double> softmax_causal(const std::vector<float>& scores, std::size_t batch_heads,
                                   std::size_t T, double scale) {
    std::vector<double> out;
    out.reserve(batch_heads * T * T);
    for (std::size_t r = 0; r < batch_heads * T; ++r) {
        const auto row = softmax_causal_row(scores.data() + r * T, r % T, T, scale);
        out.insert(out.end(), row.begin(), row.end());
    }
    return out;
}

}  // namespace course::reference
