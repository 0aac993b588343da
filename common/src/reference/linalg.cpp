#include "course/reference/linalg.h"

namespace course::reference {

std::vector<double> matmul(const std::vector<float>& A, const std::vector<float>& B, std::size_t M,
                           std::size_t N, std::size_t K) {
    std::vector<double> C(M * N, 0.0);
    // i-k-j order: the inner loop walks rows of B and C contiguously.
    for (std::size_t i = 0; i < M; ++i)
        for (std::size_t k = 0; k < K; ++k) {
            const double a = A[i * K + k];
            for (std::size_t j = 0; j < N; ++j) C[i * N + j] += a * B[k * N + j];
        }
    return C;
}

double matmul_element(const std::vector<float>& A, const std::vector<float>& B, std::size_t N,
                      std::size_t K, std::size_t row, std::size_t col) {
    double sum = 0.0;
    for (std::size_t k = 0; k < K; ++k) sum += static_cast<double>(A[row * K + k]) * B[k * N + col];
    return sum;
}

double matmul_abt_element(const std::vector<float>& A, const std::vector<float>& B, std::size_t K,
                          std::size_t row, std::size_t col) {
    double sum = 0.0;
    for (std::size_t k = 0; k < K; ++k) sum += static_cast<double>(A[row * K + k]) * B[col * K + k];
    return sum;
}

std::vector<double> matmul_abt(const std::vector<float>& A, const std::vector<float>& B,
                               std::size_t M, std::size_t N, std::size_t K) {
    // Both operands are read along their rows: each element is one dot product of two rows.
    std::vector<double> C(M * N);
    for (std::size_t i = 0; i < M; ++i)
        for (std::size_t j = 0; j < N; ++j) C[i * N + j] = matmul_abt_element(A, B, K, i, j);
    return C;
}

std::vector<float> transpose(const std::vector<float>& in, std::size_t rows, std::size_t cols) {
    std::vector<float> out(in.size());
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
    return out;
}

}  // namespace course::reference
