// What is made from the serve flag table (cli/serve_flag_table.cpp): the parser, the --help text
// and the Markdown page docs/serve-flags.md.
#include "cli/serve_flags.hpp"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "http/tool_calls.hpp"
#include "model/architectures.hpp"

namespace coserve::cli {

namespace {

constexpr std::size_t k_help_column = 32;  // where --help starts each flag's text

bool looks_like_flag(std::string_view arg) { return !arg.empty() && arg[0] == '-'; }

// A strict non-negative decimal integer, as every integer flag takes.
bool read_integer(flag_value& v) {
  char* end = nullptr;
  const long long x = std::strtoll(v.text.data(), &end, 10);
  if (v.text.empty() || *end != '\0' || x < 0) {
    std::fprintf(stderr, "%.*s: %.*s: '%.*s' is not a non-negative integer\n",
                 static_cast<int>(v.prog.size()), v.prog.data(), static_cast<int>(v.name.size()),
                 v.name.data(), static_cast<int>(v.text.size()), v.text.data());
    return false;
  }
  v.integer = x;
  return true;
}

// Reads the value `row` takes from args[i + 1 ...], moving i past it; prints why it cannot.
bool read_value(const serve_flag& row, std::span<const std::string_view> args, std::size_t& i,
                flag_value& v) {
  if (row.kind == value_kind::none || row.kind == value_kind::positional) return true;
  if (i + 1 >= args.size()) {
    std::fprintf(stderr, "%.*s: %.*s needs %.*s\n", static_cast<int>(v.prog.size()), v.prog.data(),
                 static_cast<int>(v.name.size()), v.name.data(), static_cast<int>(row.needs.size()),
                 row.needs.data());
    return false;
  }
  v.text = args[++i];
  switch (row.kind) {
    case value_kind::integer:
      return read_integer(v);
    case value_kind::number:
      v.number = std::strtod(v.text.data(), nullptr);
      return true;
    case value_kind::words: {
      const std::size_t first = i + 1;
      while (i + 1 < args.size() && !args[i + 1].empty() && !looks_like_flag(args[i + 1])) ++i;
      v.more = args.subspan(first, i + 1 - first);
      return true;
    }
    default:
      return true;
  }
}

// The checks that need every flag: exactly one of MODEL_DIR and --demo, a parser for automatic
// tool choice; at least one HTTP thread.
bool finish(serve_args& a) {
  if (a.demo == !a.engine.model_dir.empty()) {
    std::fprintf(stderr, "coserve serve: give MODEL_DIR or --demo (see --help)%s\n",
                 a.engine.served_model_aliases.empty()
                     ? ""
                     : "; --served-model-name takes every word after it as a "
                       "name, so put MODEL_DIR first");
    return false;
  }
  if (a.http_threads < 1) a.http_threads = 1;
  if (a.enable_auto_tool_choice && a.tool_call_parser.empty()) {
    std::fprintf(stderr,
                 "coserve serve: --enable-auto-tool-choice needs --tool-call-parser (one of: %s)\n",
                 http::tool_parser_names().c_str());
    return false;
  }
  return true;
}

std::string_view group_name(flag_group g) {
  switch (g) {
    case flag_group::model:
      return "model";
    case flag_group::http:
      return "http";
    case flag_group::engine:
      return "engine";
    case flag_group::tools:
      return "tools";
    case flag_group::other:
      return "";
  }
  return "";
}

// The flag column of --help: "--port N", or the row's own usage ("-h, --help").
std::string usage_of(const serve_flag& f) {
  if (!f.usage.empty()) return std::string(f.usage);
  std::string u(f.name);
  if (!f.metavar.empty()) u.append(" ").append(f.metavar);
  return u;
}

// The default a row shows: its default_text, else its field's value in a default serve_args
// (for flags that take a value).
std::string flag_default(const serve_flag& f) {
  if (!f.default_text.empty()) return std::string(f.default_text);
  const bool takes_value = f.kind == value_kind::text || f.kind == value_kind::integer ||
                           f.kind == value_kind::number || f.kind == value_kind::words;
  if (!takes_value || !f.target.show) return {};
  return f.target.show(serve_args{});
}

// Markdown text in a table cell: one line, with what Markdown would read as markup escaped (in a
// code span, only the table's column separator).
std::string markdown_cell(std::string_view text, bool code = false) {
  std::string out;
  for (char c : text) {
    if (code && c != '|') {
      out += c;
      continue;
    }
    switch (c) {
      case '\n':
        out += ' ';
        break;
      case '|':
      case '*':
      case '\\':
        out += '\\';
        out += c;
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

const serve_flag* find_serve_flag(std::string_view name) {
  if (!looks_like_flag(name)) return nullptr;
  for (const serve_flag& f : serve_flags())
    if (f.name == name || (!f.alias.empty() && f.alias == name)) return &f;
  return nullptr;
}

bool read_serve_flag(std::string_view prog, const serve_flag& row,
                     std::span<const std::string_view> args, std::size_t& i, serve_args& a) {
  flag_value v{.prog = prog, .name = args[i], .flag = row.name};
  if (row.kind == value_kind::positional) v.text = args[i];
  return read_value(row, args, i, v) && row.target.store(a, v);
}

parse_outcome parse_serve_flags(int argc, char** argv, serve_args& a) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const serve_flag* row = find_serve_flag(args[i]);
    if (!row && looks_like_flag(args[i])) {
      std::fprintf(stderr, "coserve serve: unknown flag '%.*s' (see --help)\n",
                   static_cast<int>(args[i].size()), args[i].data());
      return parse_outcome::error;
    }
    if (!row) row = &serve_positional_flag();
    if (row->kind == value_kind::help) return parse_outcome::help;
    if (row->kind == value_kind::markdown) return parse_outcome::markdown;
    if (!read_serve_flag("coserve serve", *row, args, i, a)) return parse_outcome::error;
  }
  return finish(a) ? parse_outcome::ok : parse_outcome::error;
}

std::string flag_help(const serve_flag& f) {
  std::string text(f.help);
  constexpr std::string_view k_placeholder = "{default}";
  if (const auto at = text.find(k_placeholder); at != std::string::npos)
    text.replace(at, k_placeholder.size(), flag_default(f));
  return text;
}

std::string serve_help_text() {
  std::string out(serve_help_intro());
  std::optional<flag_group> group;
  for (const serve_flag& f : serve_flags()) {
    if (group != f.group) {
      group = f.group;
      if (!group_name(f.group).empty()) out.append(group_name(f.group)).append(":\n");
    }
    std::string line = "  " + usage_of(f);
    if (line.size() < k_help_column)
      line.resize(k_help_column, ' ');
    else
      line.append("\n").append(k_help_column, ' ');
    for (char c : flag_help(f)) {
      line += c;
      if (c == '\n') line.append(k_help_column, ' ');
    }
    out.append(line).append("\n");
  }
  return with_architecture_lists(out);
}

std::string serve_flags_markdown() {
  std::string out =
      "# `coserve serve` flags\n\n"
      "<!-- Generated from the flag table in cli/serve_flag_table.cpp by `coserve serve\n"
      "--help-markdown > docs/serve-flags.md`; tests/cli/test_serve_flags.cpp fails when this\n"
      "file differs from what the table generates. -->\n\n"
      "The flags `coserve serve --help` explains, one table per group. Names follow `vllm serve`\n"
      "where one exists.\n\n```\n";
  out.append(serve_help_intro()).append("```\n");
  std::optional<flag_group> group;
  for (const serve_flag& f : serve_flags()) {
    if (group != f.group) {
      group = f.group;
      const std::string_view name = group_name(f.group);
      out.append("\n## ").append(name.empty() ? "help" : name).append("\n\n");
      out.append("| flag | default | meaning |\n|---|---|---|\n");
    }
    std::string flag = "`";
    flag.append(usage_of(f)).append("`");
    if (!f.alias.empty() && f.usage.empty()) flag.append(", `").append(f.alias).append("`");
    out.append("| ").append(markdown_cell(flag, true)).append(" | ");
    out.append(markdown_cell(flag_default(f))).append(" | ");
    out.append(markdown_cell(with_architecture_lists(flag_help(f)))).append(" |\n");
  }
  return out;
}

}  // namespace coserve::cli
