// CPU references for matrix exercises, accumulated in double.
#pragma once

#include <cstddef>
#include <vector>

namespace course::reference {

// C = A * B, row-major: A is M x K, B is K x N.
std::vector<double> matmul(const std::vector<float>& A, const std::vector<float>& B, std::size_t M,
                           std::size_t N, std::size_t K);

// One element C[row][col] of A * B (spot checks of sizes too large for the full product).
double matmul_element(const std::vector<float>& A, const std::vector<float>& B, std::size_t N,
                      std::size_t K, std::size_t row, std::size_t col);

// C = A * B^T, row-major: A is M x K, B is N x K (both K-contiguous, the layout of module 05's
// tensor-core GEMMs), C is M x N.
std::vector<double> matmul_abt(const std::vector<float>& A, const std::vector<float>& B,
                               std::size_t M, std::size_t N, std::size_t K);

// One element C[row][col] of A * B^T.
double matmul_abt_element(const std::vector<float>& A, const std::vector<float>& B, std::size_t K,
                          std::size_t row, std::size_t col);

// The transpose of a rows x cols row-major matrix (cols x rows).
std::vector<float> transpose(const std::vector<float>& in, std::size_t rows, std::size_t cols);

}  // namespace course::reference
