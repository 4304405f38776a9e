// `coserve tokenize` and `coserve detokenize`: line-oriented JSON filters over a tokenizer.json
// (or its folder, or a GGUF file's tokenizer).
//   tokenize TOKENIZER [--add-special-tokens]: one JSON string per stdin line -> one JSON array of
//   ids detokenize TOKENIZER [--skip-special-tokens]: one JSON array of ids per line -> one JSON
//   string
// A line that is not the expected JSON prints an error to stderr and the command exits 1 at the
// end.
#include <simdjson.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.hpp"
#include "model/gguf_model.hpp"
#include "model/text/json/value.hpp"
#include "model/text/tokenizer/tokenizer.hpp"

namespace coserve::cli {

namespace {

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  json::append_escaped(out, s);
  out.push_back('"');
}

struct args {
  std::string path;
  bool flag = false;
  bool help = false;
  bool bad = false;
};

args parse(int argc, char** argv, std::string_view flag_name) {
  args a;
  for (int i = 1; i < argc; ++i) {
    std::string_view s = argv[i];
    if (s == "--help" || s == "-h")
      a.help = true;
    else if (s == flag_name)
      a.flag = true;
    else if (!s.starts_with("--") && a.path.empty())
      a.path = s;
    else
      a.bad = true;
  }
  if (a.path.empty() && !a.help) a.bad = true;
  return a;
}

int run_filter(const char* name, int argc, char** argv, std::string_view flag_name,
               const char* usage,
               bool (*line_fn)(const tokenizer&, bool, simdjson::dom::element, std::string&)) {
  const args a = parse(argc, argv, flag_name);
  if (a.help || a.bad) {
    std::fprintf(a.help ? stdout : stderr, "%s", usage);
    return a.help ? 0 : 2;
  }
  auto tok = [&]() -> result<tokenizer> {
    if (!is_gguf_file(a.path)) return tokenizer::load(a.path);
    auto f = gguf_file::open(a.path);
    if (!f) return f.err();
    return load_gguf_tokenizer(**f);
  }();
  if (!tok) {
    std::fprintf(stderr, "coserve %s: %s\n", name, tok.err().message.c_str());
    return 1;
  }
  simdjson::dom::parser parser;
  std::string line, out;
  int status = 0;
  long line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    if (line.empty()) continue;
    simdjson::dom::element value;
    out.clear();
    if (parser.parse(line).get(value) || !line_fn(*tok, a.flag, value, out)) {
      std::fprintf(
          stderr, "coserve %s: line %ld: not %s\n", name, line_no,
          flag_name == "--add-special-tokens" ? "a JSON string" : "a JSON array of integer ids");
      status = 1;
      continue;
    }
    out.push_back('\n');
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::fflush(stdout);
  return status;
}

bool tokenize_line(const tokenizer& tok, bool add_special, simdjson::dom::element v,
                   std::string& out) {
  std::string_view text;
  if (v.get(text)) return false;
  const auto ids = tok.encode(text, add_special);
  out.push_back('[');
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) out.push_back(',');
    out += std::to_string(ids[i]);
  }
  out.push_back(']');
  return true;
}

bool detokenize_line(const tokenizer& tok, bool skip_special, simdjson::dom::element v,
                     std::string& out) {
  simdjson::dom::array arr;
  if (v.get(arr)) return false;
  std::vector<int32_t> ids;
  for (auto x : arr) {
    int64_t id = 0;
    if (x.get(id)) return false;
    ids.push_back(static_cast<int32_t>(id));
  }
  append_json_string(out, tok.decode(ids, skip_special));
  return true;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  return run_filter(
      "tokenize", argc, argv, "--add-special-tokens",
      "usage: coserve tokenize TOKENIZER [--add-special-tokens]\n"
      "  TOKENIZER: a folder holding tokenizer.json (and tokenizer_config.json), the file, or a "
      "GGUF\n"
      "             model file (its tokenizer.ggml.* metadata).\n"
      "  Reads one JSON string per stdin line; prints one JSON array of token ids per line.\n"
      "  --add-special-tokens  apply the post-processor (BOS/EOS templates)\n",
      tokenize_line);
}

int cmd_detokenize(int argc, char** argv) {
  return run_filter(
      "detokenize", argc, argv, "--skip-special-tokens",
      "usage: coserve detokenize TOKENIZER [--skip-special-tokens]\n"
      "  TOKENIZER: a folder holding tokenizer.json (and tokenizer_config.json), the file, or a "
      "GGUF\n"
      "             model file (its tokenizer.ggml.* metadata).\n"
      "  Reads one JSON array of token ids per stdin line; prints one JSON string per line.\n"
      "  --skip-special-tokens  leave out special tokens\n",
      detokenize_line);
}

}  // namespace coserve::cli
