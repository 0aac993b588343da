// modules/09_quantization/tensor_core.h on the CPU emulator: module 07's wrappers (which the GPU
// build includes as they are) as the emulator carries them out, from its own folder; tc::mma_bf16
// and tc::pack_bf16 are bf16 there too in every build, as on the GPU.
#pragma once

#include "../07_attention/tensor_core.h"
