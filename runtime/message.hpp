// Message traits: an actor's interface is a typed list of plain structs.
//
// - A message that expects a reply declares `using reply_type = R;` and is sent with `ask`.
// - A message with a member `request_id` (convertible to uint64_t) is traced under that id.
// - message_name<T>() is the type's name, computed at compile time (no RTTI), used by traces.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

namespace coserve::rt {

template <class... Msgs>
struct message_list {};

template <class M>
concept has_reply = requires {
  typename M::reply_type;
};

template <class M>
concept has_request_id = requires(const M& m) {
  static_cast<uint64_t>(m.request_id);
};

template <class M>
uint64_t request_id_of(const M& m) noexcept {
  if constexpr (has_request_id<M>) {
    return static_cast<uint64_t>(m.request_id);
  } else {
    return 0;
  }
}

namespace detail {
template <class T>
constexpr std::string_view raw_type_name() noexcept {
  return __PRETTY_FUNCTION__;  // "... raw_type_name() [with T = ns::type; ...]"
}

template <class T>
constexpr std::string_view clean_type_name() noexcept {
  std::string_view s = raw_type_name<T>();
  const auto start = s.find("T = ");
  if (start == std::string_view::npos) return s;
  s.remove_prefix(start + 4);
  const auto end = s.find_first_of(";]");
  if (end != std::string_view::npos) s = s.substr(0, end);
  // Drop namespaces and enclosing classes: traces show the short name.
  const auto angle = s.find('<');
  const auto colon = s.rfind("::", angle == std::string_view::npos ? s.size() : angle);
  if (colon != std::string_view::npos) s.remove_prefix(colon + 2);
  return s;
}

template <class T>
struct name_holder {
  static constexpr std::string_view view = clean_type_name<T>();
  static constexpr auto storage = [] {
    struct buf {
      char data[view.size() + 1]{};
    } b;
    for (std::size_t i = 0; i < view.size(); ++i) b.data[i] = view[i];
    return b;
  }();
};
}  // namespace detail

// A NUL-terminated, statically allocated name for T ("ping", "step_plan", ...).
template <class T>
constexpr const char* message_name() noexcept {
  return detail::name_holder<T>::storage.data;
}

}  // namespace coserve::rt
