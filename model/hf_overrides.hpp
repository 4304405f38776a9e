// vLLM's --hf-overrides: a JSON object merged into a model folder's config.json before it is read
// (Qwen3-Reranker's {"architectures": ["Qwen3ForSequenceClassification"],
// "classifier_from_token": ["no", "yes"], ...}). Its keys replace config.json's; where both hold an
// object under a key, the two are merged key by key (as vLLM updates a nested config).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "base/result.hpp"

namespace coserve {

// `config_json` with `overrides` merged in ("" leaves it as it is). Errors: "invalid_argument"
// naming --hf-overrides when it is not a JSON object, "invalid_model" naming `origin` when
// config_json is not one.
result<std::string> apply_hf_overrides(std::string_view config_json, std::string_view overrides,
                                       std::string_view origin);

// `dir`/config.json with the overrides applied.
result<std::string> read_config_json(const std::filesystem::path& dir, std::string_view overrides);

}  // namespace coserve
