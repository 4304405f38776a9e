// openapi: the OpenAPI 3.1 description of the server's routes, served at GET /openapi.json. Its
// paths are the route table's (http/routes.hpp) and its request schemas are made from the
// request-field table the parsers read through (http/request_fields.hpp): they state what the
// router and the parsers accept (types, ranges, enums); a request outside them is answered 400
// (404 for an unknown model). Response schemas cover the 200 bodies and the error bodies.
#pragma once

#include <string>

#include "http/openai_request.hpp"

namespace coserve::http {

// The document as JSON text, with the served model name, vocabulary size, context length and
// `version` filled in; `webui`: the web UI's data routes are served (and listed).
std::string openapi_json(const model_limits& limits, const std::string& version, bool webui = true);

}  // namespace coserve::http
