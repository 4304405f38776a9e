// The flags of `coserve serve`, declared once in a table (cli/serve_flags.cpp): each row names a
// flag, its other spellings, the value it takes, the group `--help` lists it under, its help text
// (with its default) and the serve_args or engine_config field it sets. The parser, the `--help`
// text and docs/serve-flags.md (`coserve serve --help-markdown`) are all produced from that table.
// Flag names follow `vllm serve` where one exists.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "actors/engine.hpp"
#include "http/cors.hpp"
#include "http/http_types.hpp"

namespace coserve::cli {

// What `coserve serve` runs with: the engine's config plus the HTTP front's settings.
struct serve_args {
  engine_config engine;
  bool demo = false;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  bool webui = true;
  int http_threads = 2;
  http::server_limits limits;
  int shutdown_timeout_s = 30;
  int sse_keepalive_s = 15;
  bool enable_auto_tool_choice = false;
  bool trust_request_chat_template = false;
  bool generation_config_given = false;  // --generation-config was given (--demo's default: vllm)
  http::cors_policy cors;
  std::string tool_call_parser;
  std::string reasoning_parser;
};

// The groups `--help` lists the flags under, in this order (`other` has no heading).
enum class flag_group { model, http, engine, tools, other };

// How a flag takes its value from the command line.
enum class value_kind {
  none,        // a switch: no value
  text,        // the next argument
  integer,     // the next argument, a non-negative decimal integer
  number,      // the next argument, a decimal number (strtod)
  words,       // the next argument and every following one that does not start with '-'
  positional,  // not a flag: an argument that does not start with '-' (MODEL_DIR)
  help,        // prints the --help text and exits 0
  markdown,    // prints the table as Markdown (docs/serve-flags.md) and exits 0
};

// One flag's value as parsed: `name` is the spelling used on the command line.
struct flag_value {
  std::string_view prog;                   // what errors start with ("coserve serve")
  std::string_view name;                   // as typed ("-tp")
  std::string_view flag;                   // the row's name ("--tensor-parallel-size")
  std::string_view text;                   // text, number, words (the first), positional
  long long integer = 0;                   // integer
  double number = 0;                       // number
  std::span<const std::string_view> more;  // words after the first
};

// Where a flag's value goes. `store` writes it (printing the error and returning false when the
// value is refused); `show` formats the field's value (the default shown in help texts).
struct flag_target {
  bool (*store)(serve_args&, const flag_value&) = nullptr;
  std::string (*show)(const serve_args&) = nullptr;
};

struct serve_flag {
  std::string_view name;   // "--max-num-seqs"; MODEL_DIR for the positional argument
  std::string_view alias;  // another spelling ("-tp"), or ""
  // What --help shows after the name ("N", "cpu|cuda"); `usage` replaces name + metavar when set.
  std::string_view metavar;
  std::string_view usage;
  std::string_view needs;  // "--max-num-seqs needs N" when the value is missing
  value_kind kind = value_kind::none;
  flag_group group = flag_group::other;
  flag_target target;
  // Lines of help text; "{default}" stands for the default: `default_text`, or else the target's
  // value in a default-constructed serve_args.
  std::string_view help;
  std::string_view default_text;
};

// The table, in the order --help lists it.
std::span<const serve_flag> serve_flags();
// What --help prints before the table: the usage line and what the server serves.
std::string_view serve_help_intro();
// The row of the argument that is not a flag (MODEL_DIR).
const serve_flag& serve_positional_flag();
// The row named `name` (or its alias), or null.
const serve_flag* find_serve_flag(std::string_view name);

// Parses `coserve serve` arguments (argv[0] is "serve") into `a`. An error is printed to stderr.
enum class parse_outcome { ok, help, markdown, error };
parse_outcome parse_serve_flags(int argc, char** argv, serve_args& a);

// Reads the flag `row` spelled args[i] (its value from args[i + 1 ...], moving i past it) into
// `a`, as another command that takes some of serve's flags does; false when it is refused (the
// reason printed, starting with `prog`). Each view in `args` ends at a NUL (argv's strings).
bool read_serve_flag(std::string_view prog, const serve_flag& row,
                     std::span<const std::string_view> args, std::size_t& i, serve_args& a);

// The help text of one row with "{default}" replaced.
std::string flag_help(const serve_flag& f);
// `coserve serve --help`.
std::string serve_help_text();
// docs/serve-flags.md.
std::string serve_flags_markdown();

}  // namespace coserve::cli
