// CPU references for the softmax exercises (module 06), accumulated in double.
//
// softmax(x)_j = exp(x_j - m) / sum_k exp(x_k - m) with m = max_k x_k. Subtracting m changes
// nothing mathematically and keeps every exponent <= 0. Entries equal to -inf contribute 0; every
// row needs at least one finite entry (otherwise the sum is 0 and the result undefined).
#pragma once

#include <cstddef>
#include <vector>

namespace course::reference {

// Softmax of one row of `cols` values, each multiplied by `scale` first.
std::vector<double> softmax_row(const float* row, std::size_t cols, double scale = 1.0);

// Softmax of every row of a rows x cols row-major matrix.
std::vector<double> softmax_rows(const std::vector<float>& in, std::size_t rows, std::size_t cols);

// Row i (0 <= i < T) of a causal masked, scaled softmax: the softmax of scale * row[0..i], then
// T - i - 1 exact zeros. row[i+1..T) is never read.
std::vector<double> softmax_causal_row(const float* row, std::size_t i, std::size_t T, double scale);

// softmax_causal_row for every row of batch_heads stacked T x T score matrices (matrix h starts at
// h * T * T): the attention probabilities of a causal (decoder) model.
std::vector<double> softmax_causal(const std::vector<float>& scores, std::size_t batch_heads,
                                   std::size_t T, double scale);

}  // namespace course::reference
