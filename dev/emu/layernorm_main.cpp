// Driver for dev/emu/run.sh: runs the layernorm solution on the emulator over every path of its
// launcher (warp and block rows in registers; rows staged in one block or split over a cluster of
// 1, 2, 3 blocks; a row too long to stage) and compares with a double-precision reference.
// Odd row counts cover a short last group; an outlier in the last column of the last row covers
// a skipped tail. Outputs sit between NaN-filled guard zones: unwritten elements and writes past
// either end count as failures. Argument: only the shapes with this many columns.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "layernorm.h"

namespace {

constexpr std::size_t kGuard = 64;  // NaN floats on each side of every output

struct Shape {
    int rows, cols;
};

// True if every output matches the reference within float32 accumulation error.
bool check_shape(Shape shape, std::mt19937& gen) {
    const int rows = shape.rows, cols = shape.cols;
    const std::size_t n = std::size_t(rows) * cols;
    std::vector<float> x(n), gamma(cols), beta(cols);
    std::vector<float> y(n + 2 * kGuard, NAN), mean(rows + 2 * kGuard, NAN),
        rstd(rows + 2 * kGuard, NAN);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int r = 0; r < rows; ++r) {
        const float offset = 3.0f * u(gen);  // every row its own mean
        for (int c = 0; c < cols; ++c) x[std::size_t(r) * cols + c] = offset + u(gen);
    }
    x[n - 1] = 300.0f;
    for (int c = 0; c < cols; ++c) {
        gamma[c] = 1.0f + 0.5f * u(gen);
        beta[c] = 0.5f * u(gen);
    }
    layernorm(x.data(), gamma.data(), beta.data(), y.data() + kGuard, mean.data() + kGuard,
              rstd.data() + kGuard, rows, cols);

    long outside = 0, bad = 0;
    for (std::size_t i = 0; i < kGuard; ++i)
        outside += !std::isnan(y[i]) + !std::isnan(y[kGuard + n + i]) + !std::isnan(mean[i]) +
                   !std::isnan(mean[kGuard + rows + i]) + !std::isnan(rstd[i]) +
                   !std::isnan(rstd[kGuard + rows + i]);
    double worst = 0.0;
    for (int r = 0; r < rows; ++r) {
        const float* row = x.data() + std::size_t(r) * cols;
        double sum = 0.0, squares = 0.0;
        for (int c = 0; c < cols; ++c) sum += row[c];
        const double m = sum / cols;
        for (int c = 0; c < cols; ++c) squares += (row[c] - m) * (row[c] - m);
        const double rs = 1.0 / std::sqrt(squares / cols + kLayerNormEps);
        // Float32 sums of cols terms: errors of a few ulps times sqrt(cols), relative to the
        // mean's size next to the spread. A wrong kernel is off by far more (order 1).
        const double unit = 6e-8 * std::sqrt(double(cols)) * (1.0 + std::fabs(m) * rs);
        auto check = [&](double got, double want, double size) {
            const double error = std::fabs(got - want) / (unit * (1.0 + size));
            if (!(error <= 1.0)) ++bad;
            if (!(error <= worst)) worst = error;  // NaN included
        };
        check(mean[kGuard + r], m, std::fabs(m) + 1.0 / rs);
        check(rstd[kGuard + r], rs, rs);
        for (int c = 0; c < cols; ++c) {
            const double want = (row[c] - m) * rs * gamma[c] + beta[c];
            check(y[kGuard + std::size_t(r) * cols + c], want, std::fabs(gamma[c]) + std::fabs(want));
        }
    }
    const bool ok = bad == 0 && outside == 0;
    std::printf("%5d x %6d: %s (%ld wrong, %ld written outside, worst error / tolerance %.2f)\n",
                rows, cols, ok ? "ok" : "FAIL", bad, outside, worst);
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
    const Shape shapes[] = {{9, 33},     {3, 1023},  {2, 4096},  {3, 4097},
                            {2, 8192},   {3, 25601}, {5, 50304}, {1, 50304},
                            {3, 70001},  {2, 70004}, {1, 204803}};
    std::mt19937 gen(1234);
    int failures = 0;
    for (const Shape& shape : shapes)
        if (argc < 2 || std::atoi(argv[1]) == shape.cols) failures += !check_shape(shape, gen);
    return failures == 0 ? 0 : 1;
}
