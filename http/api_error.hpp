// api_error: an OpenAI-shaped error, {"error":{"message","type","param","code"}}, with its status.
// Every client mistake becomes one of these (4xx); 5xx is kept for the server's own failures.
#pragma once

#include <optional>
#include <string>

#include "http/http_types.hpp"

namespace coserve::http {

struct api_error {
  int status = 400;
  std::string message;
  std::string type = "BadRequestError";  // the class name the official client raises
  std::string param;                     // the offending field; empty => null
  std::string code;                      // empty => the status number

  static api_error bad_request(std::string message, std::string param = {}) {
    return {400, std::move(message), "BadRequestError", std::move(param), {}};
  }
  static api_error not_found(std::string message, std::string param = {}) {
    return {404, std::move(message), "NotFoundError", std::move(param), {}};
  }
};

// The JSON body {"error":{...}} (compact, no trailing newline).
std::string error_json(const api_error& e);
http_response error_response(const api_error& e);

}  // namespace coserve::http
