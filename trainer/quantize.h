// Weight-only quantization of a trained GPT (module 09's formats; trainer/README.md, "Quantized
// weights"): each block's four linear weights (qkv, the attention's projection, the MLP's two)
// quantized and dequantized on the host ("fake quantization"), so that the model's own forward,
// on the dequantized weights, measures what the format costs in validation loss. Embeddings, the
// LM head (tied to wte), LayerNorms and biases stay as they are. Host code only
// (tests/quantize_test.cpp runs it without a GPU).
//
// The formats, bit for bit those of module 09's contracts (its CPU references,
// course::reference::quantize_int8_rows and quantize_int4_groups, in
// common/include/course/reference/quantize.h once the module is in place):
//   W8A16: INT8 per output row: scale = absmax(row) / 127 (a float division), q = clamp(
//          round_half_even(w / scale), -127, 127), w^ = q * scale; a row of zeros: scale 0, q 0.
//   W4A16: INT4 per group of 128 along K (a row's input dimension): scale = absmax(group) / 7,
//          q = clamp(round_half_even(w / scale), -7, 7), w^ = q * scale; K a multiple of 128.
// The scales are float32. -128 (-8) is never produced: the grid is symmetric.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gpt.h"

namespace trainer {

enum class QuantFormat { w8a16, w4a16 };

constexpr int kInt4Group = 128;  // values along K sharing a scale in W4A16

// "w8a16" / "w4a16"; false for another name.
bool parse_quant_format(const std::string& name, QuantFormat* format);
const char* quant_format_name(QuantFormat format);
// What the format keeps, in a few words for the table ("int8, a float scale per row").
const char* quant_format_layout(QuantFormat format);

// One value quantized with `scale` to -limit .. limit (127 for INT8, 7 for INT4): the float
// division, rounded half to even, clamped; 0 where scale is 0.
int quantize_value(float w, float scale, int limit);

// A row-major [rows, cols] matrix (cols: K) quantized and dequantized in place in the format.
// W4A16 needs cols % 128 == 0 (std::invalid_argument, one line, otherwise).
void fake_quantize_matrix(float* w, std::size_t rows, std::size_t cols, QuantFormat format);

// The quantized linear layers, and why a model may not take a format: "" where it does, else
// one line (W4A16's groups of 128 need C to be a multiple of 128).
const std::vector<ParamTensor>& quantized_tensors();
std::string quant_format_refusal(const GptConfig& config, QuantFormat format);

// The flat parameters (param_layout(config)) with every quantized tensor's matrices fake-quantized
// per layer; the other tensors bit for bit as given. Throws std::invalid_argument where
// quant_format_refusal says why.
std::vector<float> fake_quantize_params(const GptConfig& config, const std::vector<float>& params,
                                        QuantFormat format);

// Bytes of the quantized layers' weights: in 16 bits (bf16 / fp16), or in the format with its
// float scales.
std::size_t linear_weight_bytes_16bit(const GptConfig& config);
std::size_t linear_weight_bytes(const GptConfig& config, QuantFormat format);

}  // namespace trainer
