// The serve flag table (cli/serve_flag_table.cpp) and what is made from it: the parser, the --help
// text and docs/serve-flags.md.
#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/serve_flags.hpp"

using namespace coserve;
using namespace coserve::cli;

namespace {

struct parsed {
  parse_outcome outcome;
  serve_args args;
};

// Parses `coserve serve` arguments (without "serve").
parsed parse(std::vector<std::string> words) {
  words.insert(words.begin(), "serve");
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  parsed p;
  p.outcome = parse_serve_flags(int(argv.size()), argv.data(), p.args);
  return p;
}

serve_args parse_ok(std::vector<std::string> words) {
  parsed p = parse(std::move(words));
  REQUIRE(p.outcome == parse_outcome::ok);
  return std::move(p.args);
}

bool takes_value(const serve_flag& f) {
  return f.kind == value_kind::text || f.kind == value_kind::integer ||
         f.kind == value_kind::number || f.kind == value_kind::words;
}

}  // namespace

TEST_CASE("serve flags: every row is complete and every spelling names one row", "[cli]") {
  std::set<std::string_view> spellings;
  int positional = 0;
  for (const serve_flag& f : serve_flags()) {
    INFO(f.name);
    CHECK(!f.help.empty());
    if (f.kind == value_kind::positional) {
      ++positional;
      CHECK(f.target.store != nullptr);
      continue;
    }
    CHECK(f.name.starts_with("-"));
    CHECK(spellings.insert(f.name).second);
    if (!f.alias.empty()) CHECK(spellings.insert(f.alias).second);
    CHECK(find_serve_flag(f.name) == &f);
    if (!f.alias.empty()) CHECK(find_serve_flag(f.alias) == &f);
    if (takes_value(f)) {
      CHECK(!f.metavar.empty());
      CHECK(!f.needs.empty());
    }
    if (f.kind != value_kind::help && f.kind != value_kind::markdown)
      CHECK(f.target.store != nullptr);
  }
  CHECK(positional == 1);
  CHECK(find_serve_flag("MODEL_DIR") == nullptr);
}

TEST_CASE("serve flags: --help lists every row with its text, defaults filled in", "[cli]") {
  const std::string help = serve_help_text();
  CHECK(help.starts_with("usage: coserve serve [MODEL_DIR | --demo] [flags]\n"));
  CHECK(help.find("{default}") == std::string::npos);
  for (const serve_flag& f : serve_flags()) {
    INFO(f.name);
    CHECK(help.find(std::string(f.name)) != std::string::npos);
    // Each line of its text at the help column: the first after the flag, the others indented.
    const std::string text = flag_help(f);
    const std::size_t first = help.find(text.substr(0, text.find('\n')));
    REQUIRE(first != std::string::npos);
    CHECK(first - (help.rfind('\n', first) + 1) == 32);
    for (std::size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 1)) {
      const std::string line = text.substr(at + 1, text.find('\n', at + 1) - at - 1);
      // A line holding the registry's architecture lists is rewrapped where they are filled in.
      if (line.find("architectures}") != std::string::npos) continue;
      CHECK(help.find("\n" + std::string(32, ' ') + line + "\n") != std::string::npos);
    }
  }
  // The model folder's paragraph names the registry's architectures, config.json's and GGUF's.
  CHECK(help.find("{architectures}") == std::string::npos);
  CHECK(help.find("LlamaForCausalLM") != std::string::npos);
  CHECK(help.find("Qwen3MoeForCausalLM") != std::string::npos);
  CHECK(help.find("qwen3moe") != std::string::npos);
  // A few lines as users and scripts know them.
  CHECK(help.find("\n  --max-num-seqs N              running sequences at most (default: 256)\n") !=
        std::string::npos);
  CHECK(help.find("\n  --port N                      listen port; 0 picks a free one and logs it "
                  "(default: 8000)\n") != std::string::npos);
  CHECK(help.find("\n  --attention-backend auto|native|flashinfer\n") != std::string::npos);
  CHECK(help.find("(default: '[\"*\"]', any); as vLLM's flag") != std::string::npos);
  CHECK(help.find("\n  --idle-timeout-s S            keep-alive idle limit in seconds (default: "
                  "60)\n") != std::string::npos);
  CHECK(
      help.find("\nhttp:\n  --host ADDR                   listen address (default: 127.0.0.1)\n") !=
      std::string::npos);
  CHECK(
      help.ends_with("\n  -h, --help                    this text\n"
                     "  --help-markdown               this text as a Markdown page "
                     "(docs/serve-flags.md is its output)\n"));
}

TEST_CASE("serve flags: docs/serve-flags.md is what the table generates", "[cli]") {
  std::ifstream in(std::string(COSERVE_SOURCE_DIR) + "/docs/serve-flags.md", std::ios::binary);
  REQUIRE(in);
  std::ostringstream doc;
  doc << in.rdbuf();
  INFO("regenerate it: build/bin/coserve serve --help-markdown > docs/serve-flags.md");
  CHECK(doc.str() == serve_flags_markdown());
}

TEST_CASE("serve flags: each flag's value lands in its field", "[cli]") {
  const serve_args d = parse_ok({"--demo"});
  CHECK(d.demo);
  CHECK(d.engine.model_dir.empty());
  CHECK(d.port == 8000);
  CHECK(d.host == "127.0.0.1");

  const serve_args m = parse_ok({"/models/m", "--served-model-name", "a", "b", "c", "--port", "0"});
  CHECK(m.engine.model_dir == "/models/m");
  CHECK(m.engine.served_model_name == "a");
  CHECK(m.engine.served_model_aliases == std::vector<std::string>{"b", "c"});
  CHECK(m.port == 0);

  const serve_args e = parse_ok({"--demo",
                                 "--device",
                                 "cuda",
                                 "--enforce-eager",
                                 "--attention-backend",
                                 "FlashInfer",
                                 "--max-num-seqs",
                                 "7",
                                 "--max-num-batched-tokens",
                                 "64",
                                 "--max-model-len",
                                 "300",
                                 "--block-size",
                                 "32",
                                 "--num-gpu-blocks-override",
                                 "99",
                                 "--cpu-kv-cache-gib",
                                 "0.5",
                                 "--load-format",
                                 "dummy",
                                 "--quantization",
                                 "fp8",
                                 "--skip-tokenizer-init",
                                 "--gpu-memory-utilization",
                                 "0.75",
                                 "--max-waiting-requests",
                                 "5",
                                 "--max-waiting-tokens",
                                 "6",
                                 "--tokenizer-pool-size",
                                 "3",
                                 "--cpu-threads",
                                 "2",
                                 "--cpu-isa",
                                 "auto",
                                 "-tp",
                                 "2",
                                 "--kv-cache-dtype",
                                 "fp8",
                                 "--dtype",
                                 "float32",
                                 "--no-enable-prefix-caching",
                                 "--chat-template",
                                 "T",
                                 "--generation-config",
                                 "vllm",
                                 "--override-generation-config",
                                 "{\"temperature\": 0.5}",
                                 "--trace-file",
                                 "/tmp/t.json",
                                 "--speculative-config",
                                 "{}"});
  CHECK(e.engine.device == "cuda");
  CHECK(e.engine.enforce_eager);
  CHECK(e.engine.attention_backend == "flashinfer");
  CHECK(e.engine.max_num_seqs == 7);
  CHECK(e.engine.max_num_batched_tokens == 64);
  CHECK(e.engine.max_model_len == 300);
  CHECK(e.engine.block_size == 32);
  CHECK(e.engine.num_kv_blocks == 99);
  CHECK(e.engine.kv_cache_bytes == (int64_t{1} << 29));
  CHECK(e.engine.load_format == "dummy");
  CHECK(e.engine.quantization == "fp8");
  CHECK(e.engine.skip_tokenizer_init);
  CHECK(e.engine.gpu_memory_utilization == 0.75);
  CHECK(e.engine.max_waiting == 5);
  CHECK(e.engine.max_waiting_tokens == 6);
  CHECK(e.engine.tokenizer_pool_size == 3);
  CHECK(e.engine.cpu_threads == 2);
  CHECK(e.engine.tensor_parallel_size == 2);
  CHECK(e.engine.kv_cache_dtype == "fp8");
  CHECK(e.engine.dtype == "float32");
  CHECK(!e.engine.enable_prefix_caching);
  CHECK(e.engine.chat_template == "T");
  CHECK(e.engine.generation_config == "vllm");
  CHECK(e.generation_config_given);
  CHECK(e.engine.override_generation_config == "{\"temperature\": 0.5}");
  CHECK(e.engine.trace_file == "/tmp/t.json");
  CHECK(e.engine.speculative_config == "{}");
  CHECK(parse_ok({"--demo", "--no-enable-prefix-caching", "--enable-prefix-caching"})
            .engine.enable_prefix_caching);

  const serve_args h = parse_ok({"--demo",
                                 "--host",
                                 "0.0.0.0",
                                 "--api-key",
                                 "k",
                                 "--no-webui",
                                 "--http-threads",
                                 "0",
                                 "--max-body-bytes",
                                 "1000",
                                 "--idle-timeout-s",
                                 "7",
                                 "--sse-keepalive-s",
                                 "0",
                                 "--request-timeout-s",
                                 "9",
                                 "--drain-timeout-s",
                                 "4",
                                 "--allowed-origins",
                                 "[\"http://a\"]",
                                 "--allowed-methods",
                                 "[\"GET\"]",
                                 "--allowed-headers",
                                 "[\"X-A\"]",
                                 "--allowed-credentials",
                                 "--enable-auto-tool-choice",
                                 "--tool-call-parser",
                                 "hermes",
                                 "--reasoning-parser",
                                 "qwen3",
                                 "--trust-request-chat-template"});
  CHECK(h.host == "0.0.0.0");
  CHECK(h.api_key == "k");
  CHECK(!h.webui);
  CHECK(h.http_threads == 1);  // at least one
  CHECK(h.limits.max_body_bytes == 1000);
  CHECK(h.limits.idle_timeout == std::chrono::seconds(7));
  CHECK(h.sse_keepalive_s == 0);
  CHECK(h.limits.request_timeout == std::chrono::seconds(9));
  CHECK(h.shutdown_timeout_s == 4);
  CHECK(h.cors.origins == std::vector<std::string>{"http://a"});
  CHECK(h.cors.methods == std::vector<std::string>{"GET"});
  CHECK(h.cors.headers == std::vector<std::string>{"X-A"});
  CHECK(h.cors.credentials);
  CHECK(h.enable_auto_tool_choice);
  CHECK(h.tool_call_parser == "hermes");
  CHECK(h.reasoning_parser == "qwen3");
  CHECK(h.trust_request_chat_template);
}

TEST_CASE("serve flags: a default shown in --help parses back to itself", "[cli]") {
  for (const serve_flag& f : serve_flags()) {
    if (!takes_value(f) || !f.default_text.empty() || !f.target.show) continue;
    const std::string shown = f.target.show(serve_args{});
    if (shown.empty()) continue;
    INFO(f.name << " " << shown);
    parsed p = parse({"--demo", std::string(f.name), shown});
    REQUIRE(p.outcome == parse_outcome::ok);
    CHECK(f.target.show(p.args) == shown);
  }
}

TEST_CASE("serve flags: help, markdown and refused arguments", "[cli]") {
  CHECK(parse({"--help"}).outcome == parse_outcome::help);
  CHECK(parse({"-h", "--bogus"}).outcome == parse_outcome::help);
  CHECK(parse({"--bogus", "-h"}).outcome == parse_outcome::error);
  CHECK(parse({"--help-markdown"}).outcome == parse_outcome::markdown);
  const std::vector<std::vector<std::string>> refused = {
      {},
      {"--demo", "/m"},
      {"/m", "/n"},
      {"--served-model-name", "a", "b"},
      {"--demo", "--port"},
      {"--demo", "--port", "x"},
      {"--demo", "--port", "-1"},
      {"--demo", "--port", "70000"},
      {"--demo", "--device", "tpu"},
      {"--demo", "--attention-backend", "flash"},
      {"--demo", "--tokenizer-pool-size", "0"},
      {"--demo", "-tp", "0"},
      {"--demo", "--kv-cache-dtype", "int4"},
      {"--demo", "--dtype", "fp16"},
      {"--demo", "--load-format", "x"},
      {"--demo", "--quantization", "int8"},
      {"--demo", "--tool-call-parser", "x"},
      {"--demo", "--reasoning-parser", "x"},
      {"--demo", "--allowed-origins", "http://a"},
      {"--demo", "--cpu-kv-cache-gib", "0"},
      {"--demo", "--enable-auto-tool-choice"},
      {"--demo", "--max-num-seqs", "1.5"},
      {"--demo", "-"},
  };
  for (const auto& words : refused) {
    std::string joined;
    for (const auto& w : words) joined += w + " ";
    INFO(joined);
    CHECK(parse(words).outcome == parse_outcome::error);
  }
}
