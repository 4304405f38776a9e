// The two other API dialects clients speak, mapped onto chat completions:
//   POST /v1/responses  OpenAI's Responses API (input items, instructions, function tools,
//                       text.format), streamed as response.* events or returned whole
//   POST /v1/messages   Anthropic's Messages API (system, content blocks, tool_use /
//                       tool_result, tools with input_schema), streamed as message_* /
//                       content_block_* events or returned whole; errors in Anthropic's shape
// Each request body is translated into a chat completions body, which then goes through the same
// validation (tools, structured outputs, sampling ranges), chat template, reasoning and tool-call
// parsing as /v1/chat/completions. Only one sample (n = 1); nothing is stored, so
// previous_response_id is refused.
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "http/api_error.hpp"
#include "model/text/json/value.hpp"

namespace coserve::http {

// A Responses API body as a chat completions body; errors name the Responses field.
std::variant<json::value, api_error> responses_to_chat(const json::value& body);
// An Anthropic Messages body as a chat completions body; errors name the Messages field.
std::variant<json::value, api_error> messages_to_chat(const json::value& body);

// A chat validation error's param in the dialect's terms (max_tokens -> max_output_tokens, ...).
std::string responses_param(const std::string& chat_param);
std::string messages_param(const std::string& chat_param);

// Anthropic's error body: {"type":"error","error":{"type":"invalid_request_error","message":...}}.
std::string anthropic_error_json(const api_error& e);

// A named server-sent event: "event: <event>\ndata: <compact JSON>\n\n".
std::string sse_named_event(std::string_view event, const json::value& data);

}  // namespace coserve::http
