// openapi: the OpenAPI 3.1 description of the server's routes, served at GET /openapi.json.
// Request schemas state what http/openai_request.cpp and the router accept (types, ranges,
// enums); a request outside them is answered 400 (404 for an unknown model). Response schemas
// cover the 200 bodies and the OpenAI error body.
#pragma once

#include <string>

#include "http/openai_request.hpp"

namespace coserve::http {

// The document as JSON text, with the served model name, vocabulary size, context length and
// `version` filled in.
std::string openapi_json(const model_limits& limits, const std::string& version);

}  // namespace coserve::http
