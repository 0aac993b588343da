// trainer/quantize: module 09's weight formats applied to a GPT's linear layers on the host.
// Interface: quantize.h
#include "quantize.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace trainer {
namespace {

struct MatrixShape {
    std::size_t rows, cols;  // N (outputs), K (inputs)
};

// Each quantized tensor's matrix in one layer: the weights of y = x W^T are [N, K].
MatrixShape shape_of(ParamTensor tensor, const GptConfig& config) {
    const std::size_t C = config.channels;
    switch (tensor) {
        case kQkvWeight:
            return {3 * C, C};
        case kAttnProjWeight:
            return {C, C};
        case kFcWeight:
            return {4 * C, C};
        case kFcProjWeight:
            return {C, 4 * C};
        default:
            throw std::logic_error("not a quantized linear weight");
    }
}

float absmax_of(const float* w, std::size_t count) {
    float m = 0.0f;
    for (std::size_t i = 0; i < count; ++i) m = std::max(m, std::fabs(w[i]));
    return m;
}

// Values sharing a scale: a whole row (INT8) or a group of 128 (INT4), and the largest integer.
std::size_t block_of(QuantFormat format, std::size_t cols) {
    return format == QuantFormat::w8a16 ? cols : kInt4Group;
}
int limit_of(QuantFormat format) { return format == QuantFormat::w8a16 ? 127 : 7; }

}  // namespace

bool parse_quant_format(const std::string& name, QuantFormat* format) {
    if (name == "w8a16")
        *format = QuantFormat::w8a16;
    else if (name == "w4a16")
        *format = QuantFormat::w4a16;
    else
        return false;
    return true;
}

const char* quant_format_name(QuantFormat format) {
    return format == QuantFormat::w8a16 ? "w8a16" : "w4a16";
}

const char* quant_format_layout(QuantFormat format) {
    return format == QuantFormat::w8a16 ? "int8, a float scale per row"
                                        : "int4, a float scale per 128 along K";
}

int quantize_value(float w, float scale, int limit) {
    if (scale == 0.0f) return 0;
    // std::nearbyint in the default rounding mode rounds half to even, as the GPU's
    // __float2int_rn and rintf do; the division is one float32 rounding on both.
    const float q = std::nearbyint(w / scale);
    return static_cast<int>(std::clamp(q, static_cast<float>(-limit), static_cast<float>(limit)));
}

void fake_quantize_matrix(float* w, std::size_t rows, std::size_t cols, QuantFormat format) {
    if (format == QuantFormat::w4a16 && cols % kInt4Group != 0)
        throw std::invalid_argument("w4a16 quantizes groups of 128 along K: K = " +
                                    std::to_string(cols) + " is not a multiple of 128");
    const std::size_t block = block_of(format, cols);
    const int limit = limit_of(format);
    for (std::size_t first = 0; first < rows * cols; first += block) {
        float* values = w + first;
        // absmax / 127 (or / 7): the contract's float division, not a product by its inverse.
        const float scale = absmax_of(values, block) / static_cast<float>(limit);
        for (std::size_t i = 0; i < block; ++i)
            values[i] = static_cast<float>(quantize_value(values[i], scale, limit)) * scale;
    }
}

const std::vector<ParamTensor>& quantized_tensors() {
    static const std::vector<ParamTensor> tensors = {kQkvWeight, kAttnProjWeight, kFcWeight,
                                                     kFcProjWeight};
    return tensors;
}

std::string quant_format_refusal(const GptConfig& config, QuantFormat format) {
    if (format == QuantFormat::w4a16 && config.channels % kInt4Group != 0)
        return "w4a16 quantizes groups of 128 along K: C = " + std::to_string(config.channels) +
               " is not a multiple of 128 (the presets small and gpt2-124m are)";
    return "";
}

std::vector<float> fake_quantize_params(const GptConfig& config, const std::vector<float>& params,
                                        QuantFormat format) {
    const std::string refusal = quant_format_refusal(config, format);
    if (!refusal.empty()) throw std::invalid_argument(refusal);
    const ParamLayout layout = param_layout(config);
    if (params.size() != layout.total)
        throw std::invalid_argument("fake_quantize_params: the parameters are not the model's");
    std::vector<float> out = params;
    for (ParamTensor tensor : quantized_tensors()) {
        const MatrixShape shape = shape_of(tensor, config);
        for (int l = 0; l < config.layers; ++l)
            fake_quantize_matrix(out.data() + layout.offset[tensor] + l * shape.rows * shape.cols,
                                 shape.rows, shape.cols, format);
    }
    return out;
}

std::size_t linear_weight_bytes_16bit(const GptConfig& config) {
    std::size_t bytes = 0;
    for (ParamTensor tensor : quantized_tensors()) {
        const MatrixShape shape = shape_of(tensor, config);
        bytes += 2 * shape.rows * shape.cols;
    }
    return bytes * config.layers;
}

std::size_t linear_weight_bytes(const GptConfig& config, QuantFormat format) {
    std::size_t bytes = 0;
    for (ParamTensor tensor : quantized_tensors()) {
        const MatrixShape shape = shape_of(tensor, config);
        const std::size_t values = shape.rows * shape.cols;
        const std::size_t scales = values / block_of(format, shape.cols);
        bytes += (format == QuantFormat::w8a16 ? values : values / 2) + scales * sizeof(float);
    }
    return bytes * config.layers;
}

}  // namespace trainer
