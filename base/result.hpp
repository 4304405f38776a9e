// coserve::result<T>: a value or an error, the shape of std::expected (C++23) for a C++20 build.
// Errors are values at module edges: library code returns them, never exits or aborts.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace coserve {

// An error carries a human-readable message; `code` is a short machine-readable category
// (e.g. "invalid_argument", "not_found", "io") that callers may map to statuses.
struct error {
  std::string code;
  std::string message;
  std::string param;  // the request field at fault when the caller's input is ("" otherwise)
};

inline error make_error(std::string code, std::string message) {
  return error{std::move(code), std::move(message)};
}

template <class T>
class [[nodiscard]] result {
 public:
  // Default: an error "empty" (Asio's co_spawn default-constructs results on exceptions).
  result() : v_(std::in_place_index<1>, error{"empty", "no value"}) {}
  result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT(implicit)
  result(error e) : v_(std::in_place_index<1>, std::move(e)) {}      // NOLINT(implicit)

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const error& err() const& {
    assert(!ok());
    return std::get<1>(v_);
  }
  error&& err() && {
    assert(!ok());
    return std::get<1>(std::move(v_));
  }

 private:
  std::variant<T, error> v_;
};

template <>
class [[nodiscard]] result<void> {
 public:
  result() = default;
  result(error e) : e_(std::move(e)), ok_(false) {}  // NOLINT(implicit)
  bool ok() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  const error& err() const& {
    assert(!ok_);
    return e_;
  }
  error&& err() && {
    assert(!ok_);
    return std::move(e_);
  }

 private:
  error e_;
  bool ok_ = true;
};

}  // namespace coserve
