#include "course/reference/quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace course::reference {

namespace {

// Symmetric quantization to the integers -limit .. limit (127 for INT8, 7 for INT4): the float32
// division rounds once, std::nearbyint rounds half to even (the default rounding mode), as the
// GPU's __float2int_rn and rintf do.
int quantize_symmetric(float x, float scale, int limit) {
    if (scale == 0.0f) return 0;
    const float q = std::nearbyint(x / scale);
    return static_cast<int>(std::clamp(q, static_cast<float>(-limit), static_cast<float>(limit)));
}

float absmax_of(const float* x, std::size_t count) {
    float m = 0.0f;
    for (std::size_t i = 0; i < count; ++i) m = std::max(m, std::fabs(x[i]));
    return m;
}

// The E4M3 code of a magnitude (sign apart), rounded to nearest, ties to even, saturated at 448.
std::uint8_t e4m3_magnitude(double a) {
    if (a >= 448.0) return 0x7E;  // 448 = 1.75 * 2^8 (0x7F is NaN): past it, the spec saturates
    // Subnormals (and zero): m * 2^-9 for m = 0..7; m = 8 is 2^-6, the smallest normal, whose
    // code 0x08 is the same integer.
    if (a < 0x1p-6) return static_cast<std::uint8_t>(std::nearbyint(a * 512.0));
    int e = 0;
    std::frexp(a, &e);     // a = f * 2^e, f in [0.5, 1)
    int exponent = e - 1;  // a in [2^exponent, 2^(exponent + 1)): -6 .. 8
    // 8 .. 16 eighths of 2^exponent (the implicit 1 and 3 mantissa bits); 16 carries into the
    // next binade. (Below 448 that never leaves binade 8.)
    double m = std::nearbyint(std::ldexp(a, 3 - exponent));
    if (m == 16.0) {
        m = 8.0;
        ++exponent;
    }
    return static_cast<std::uint8_t>(((exponent + 7) << 3) | (static_cast<int>(m) - 8));
}

}  // namespace

float int8_scale(float absmax) { return absmax / 127.0f; }

std::int8_t quantize_int8(float x, float scale) {
    return static_cast<std::int8_t>(quantize_symmetric(x, scale, 127));
}

Int8Rows quantize_int8_rows(const std::vector<float>& x, std::size_t rows, std::size_t cols) {
    Int8Rows out{std::vector<std::int8_t>(rows * cols), std::vector<float>(rows)};
    for (std::size_t r = 0; r < rows; ++r) {
        const float* row = x.data() + r * cols;
        const float scale = int8_scale(absmax_of(row, cols));
        out.scales[r] = scale;
        for (std::size_t c = 0; c < cols; ++c) out.q[r * cols + c] = quantize_int8(row[c], scale);
    }
    return out;
}

std::vector<float> dequantize_int8_rows(const std::vector<std::int8_t>& q,
                                        const std::vector<float>& scales, std::size_t rows,
                                        std::size_t cols) {
    std::vector<float> out(rows * cols);
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c)
            out[r * cols + c] = static_cast<float>(q[r * cols + c]) * scales[r];
    return out;
}

float int4_scale(float absmax) { return absmax / 7.0f; }

int quantize_int4(float x, float scale) { return quantize_symmetric(x, scale, 7); }

int int4_nibble(std::uint8_t byte, int high) {
    const int nibble = high ? byte >> 4 : byte & 0xF;
    return nibble >= 8 ? nibble - 16 : nibble;  // two's complement: 8..15 are -8..-1
}

Int4Groups quantize_int4_groups(const std::vector<float>& x, std::size_t rows, std::size_t cols,
                                std::size_t group) {
    const std::size_t groups = cols / group;
    Int4Groups out{std::vector<std::uint8_t>(rows * cols / 2), std::vector<float>(rows * groups)};
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t g = 0; g < groups; ++g) {
            const float* values = x.data() + r * cols + g * group;
            const float scale = int4_scale(absmax_of(values, group));
            out.scales[r * groups + g] = scale;
            for (std::size_t i = 0; i < group; i += 2) {
                const int lo = quantize_int4(values[i], scale);
                const int hi = quantize_int4(values[i + 1], scale);
                out.packed[(r * cols + g * group + i) / 2] =
                    static_cast<std::uint8_t>((lo & 0xF) | (hi & 0xF) << 4);
            }
        }
    return out;
}

std::vector<float> dequantize_int4_groups(const std::vector<std::uint8_t>& packed,
                                          const std::vector<float>& scales, std::size_t rows,
                                          std::size_t cols, std::size_t group) {
    std::vector<float> out(rows * cols);
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) {
            const std::size_t i = r * cols + c;
            const int q = int4_nibble(packed[i / 2], static_cast<int>(c % 2));
            out[i] = static_cast<float>(q) * scales[r * (cols / group) + c / group];
        }
    return out;
}

std::size_t int4_tiled_index(std::size_t n, std::size_t k, std::size_t K) {
    const std::size_t tile = n / 8, group = k / 128;
    const std::size_t step = k % 128 / 16, kk = k % 16;
    // mma.sync.m16n8k16's B fragment (PTX ISA): lane 4 g + t holds n = g and k = 2 t + half in
    // register 0, k = 2 t + 8 + half in register 1.
    const std::size_t lane = 4 * (n % 8) + kk % 8 / 2;
    const std::size_t reg = kk / 8, half = kk % 2;
    // Word step / 2 of the lane's four; in it, the register's two halves are nibbles p and p + 4.
    const std::size_t nibble = 8 * (step / 2) + 2 * (step % 2) + reg + 4 * half;
    return ((tile * (K / 128) + group) * 32 + lane) * 32 + nibble;
}

std::vector<std::uint8_t> int4_tiled(const std::vector<std::uint8_t>& packed, std::size_t N,
                                     std::size_t K) {
    std::vector<std::uint8_t> out(N * K / 2, 0);
    for (std::size_t n = 0; n < N; ++n)
        for (std::size_t k = 0; k < K; ++k) {
            const int nibble = (packed[(n * K + k) / 2] >> (4 * (k % 2))) & 0xF;
            const std::size_t to = int4_tiled_index(n, k, K);
            out[to / 2] |= static_cast<std::uint8_t>(nibble << (4 * (to % 2)));
        }
    return out;
}

std::uint8_t e4m3_encode(float value) {
    const std::uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
    return sign | e4m3_magnitude(std::fabs(static_cast<double>(value)));
}

float e4m3_decode(std::uint8_t code) {
    const int exponent = code >> 3 & 0xF, mantissa = code & 0x7;
    if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
    const float magnitude = exponent == 0
                                ? std::ldexp(static_cast<float>(mantissa), -9)
                                : std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
    return code & 0x80 ? -magnitude : magnitude;
}

double e4m3_step(double magnitude) {
    if (magnitude < 0x1p-6) return 0x1p-9;
    int e = 0;
    std::frexp(std::min(magnitude, 448.0), &e);
    return std::ldexp(1.0, e - 1 - 3);  // 3 mantissa bits: 8 steps per binade
}

int mx_shared_exponent(float absmax) {
    if (absmax == 0.0f) return -127;
    int e = 0;
    std::frexp(absmax, &e);  // floor(log2(absmax)) = e - 1, exactly, for every finite float
    return std::max(e - 1 - kE4m3MaxExponent, -127);
}

float e8m0_decode(std::uint8_t biased) {
    if (biased == 0xFF) return std::numeric_limits<float>::quiet_NaN();
    return std::ldexp(1.0f, biased - 127);  // 2^-127 is a float subnormal: still exact
}

MxBlocks quantize_mxfp8(const std::vector<float>& x, std::size_t rows, std::size_t cols) {
    const std::size_t blocks = cols / kMxBlock;
    MxBlocks out{std::vector<std::uint8_t>(rows * cols), std::vector<std::uint8_t>(rows * blocks)};
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t b = 0; b < blocks; ++b) {
            const std::size_t first = r * cols + b * kMxBlock;
            const int shared = mx_shared_exponent(absmax_of(x.data() + first, kMxBlock));
            out.scales[r * blocks + b] = static_cast<std::uint8_t>(shared + 127);
            for (std::size_t i = first; i < first + kMxBlock; ++i)
                out.elements[i] = e4m3_encode(std::ldexp(x[i], -shared));
        }
    return out;
}

std::vector<float> dequantize_mxfp8(const std::vector<std::uint8_t>& elements,
                                    const std::vector<std::uint8_t>& scales, std::size_t rows,
                                    std::size_t cols) {
    std::vector<float> out(rows * cols);
    for (std::size_t i = 0; i < rows * cols; ++i) {
        const std::size_t r = i / cols, b = i % cols / kMxBlock;
        out[i] = e4m3_decode(elements[i]) * e8m0_decode(scales[r * (cols / kMxBlock) + b]);
    }
    return out;
}

}  // namespace course::reference
