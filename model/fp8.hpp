// fp8 checkpoints (config.json quantization_config "fp8" or compressed-tensors float8; see
// quantization_config in model/config.hpp): an E4M3 / E5M2 weight matrix [rows, cols] and its
// scale tensor. With one scale per tensor or per row the codes are used as they are (a per-row
// scale vector beside them); with block scales they are dequantized to bf16 at load as
// value(code) * scale rounded to nearest even. The scale tensor (F32, BF16 or F16) is one of:
//   - one value (per-tensor: vLLM / AutoFP8 "fp8", compressed-tensors strategy tensor);
//   - [rows] or [rows, 1] (per output channel: compressed-tensors strategy channel);
//   - [ceil(rows / br), ceil(cols / bc)] (per br x bc block: `weight_scale_inv` of Hugging Face
//     fine-grained FP8 / DeepSeek-V3, compressed-tensors strategy block), br x bc given by the
//     config's weight_block_size / block_structure, 128 x 128 when it gives none.
// Activation scales (input_scale) are not used: activations stay in the executor's precision.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "model/safetensors.hpp"

namespace coserve {

// The scale tensor of fp8 weight `weight_name` ("...weight"): "...weight_scale_inv" or
// "...weight_scale", whichever the files hold; nullptr when neither.
const tensor_view* find_fp8_scale(const safetensors_set& files, const std::string& weight_name);

// One scale per row of `w` when `scale` gives one value or one per row (the CPU kernels then read
// the codes as they are, weight_ref::row_scale); empty when it is per block of columns. Errors
// as dequantize_fp8's.
result<std::vector<float>> fp8_row_scales(const tensor_view& w, const tensor_view& scale,
                                          int32_t block_rows, int32_t block_cols);

// `w` (F8_E4M3 or F8_E5M2, shape [rows, cols]) times `scale` as bf16 bits, rows * cols of them.
// block_rows / block_cols: the config's block size, 0 when it names none. Errors name both
// tensors and their shapes.
result<std::vector<uint16_t>> dequantize_fp8(const tensor_view& w, const tensor_view& scale,
                                             int32_t block_rows, int32_t block_cols);

}  // namespace coserve
