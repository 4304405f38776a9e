// `coserve serve [MODEL_DIR | --demo] [flags]`: the OpenAI-compatible HTTP server. Flag names
// follow `vllm serve` where one exists.
//
// Lifecycle: the listener opens first and /health answers 503 while the model loads, 200 once it
// serves. SIGINT/SIGTERM start a drain: /health and new generation requests answer 503, in-flight
// requests may finish for --shutdown-timeout seconds, then are aborted (their streams end with
// finish_reason "abort" and [DONE]); the process exits 0 once the last response is written. A
// second signal exits at once with status 1.
//
// The flags are declared in cli/serve_flag_table.cpp (parsed, and --help made, by serve_flags.cpp);
// the MPI parts live in serve_tp.cpp.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/engine.hpp"
#include "cli/commands.hpp"
#include "cli/serve_flags.hpp"
#include "cli/serve_tp.hpp"
#include "http/openai_api.hpp"
#include "http/server.hpp"
#include "model/demo_model.hpp"

namespace coserve::cli {

namespace {

std::filesystem::path cache_dir() {
  if (const char* c = std::getenv("COSERVE_CACHE"); c && *c) return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::filesystem::path(x) / "coserve";
  if (const char* h = std::getenv("HOME"); h && *h)
    return std::filesystem::path(h) / ".cache" / "coserve";
  return std::filesystem::temp_directory_path() / "coserve-cache";
}

// The demo model's GPT-2 tokenizer has no chat template; the server gives the demo folder a small
// role-tagged one (chat_template.jinja, read by the tokenizer like any model's) so that
// /v1/chat/completions works out of the box. OpenAI's `developer` role is its system turn; other
// unknown roles raise, as real templates do. With `tools` it lists them and asks for Hermes-style
// <tool_call> blocks (--tool-call-parser hermes), merging a leading system (or developer) message
// into that block, and renders assistant tool_calls the same way.
constexpr const char* k_demo_chat_template =
    R"TPL({%- if tools %}{{ '<|system|>\n' }}{% if messages[0]['role'] in ['system', 'developer'] %}{{ (messages[0]['content'] or '') + '\n\n' }}{% endif %}{{ '# Tools\n\nYou may call one or more functions. Their signatures are inside <tools></tools>:\n<tools>' }}{% for tool in tools %}{{ '\n' + (tool | tojson) }}{% endfor %}{{ '\n</tools>\n\nFor each call, return a JSON object with the function name and arguments inside <tool_call></tool_call> tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n' }}{% endif %}
{%- for message in messages %}
{%- if message['role'] not in ['system', 'developer', 'user', 'assistant', 'tool'] %}{{ raise_exception('Unknown role: ' + message['role']) }}{% endif %}
{%- if not (tools and loop.first and message['role'] in ['system', 'developer']) %}
{{- '<|' + ('system' if message['role'] == 'developer' else message['role']) + '|>\n' + (message['content'] or '') + '\n' }}
{%- if message['role'] == 'assistant' and message['tool_calls'] is defined and message['tool_calls'] %}
{%- for tc in message['tool_calls'] %}{% set fn = tc['function'] if tc['function'] is defined else tc %}
{{- '<tool_call>\n{"name": "' + fn['name'] + '", "arguments": ' + (fn['arguments'] if fn['arguments'] is string else (fn['arguments'] | tojson)) + '}\n</tool_call>\n' }}
{%- endfor %}
{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %})TPL";

std::string read_text(const std::filesystem::path& p) {
  std::FILE* f = std::fopen(p.string().c_str(), "rb");
  if (!f) return {};
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  return text;
}

// Writes the demo model into `dir` when it is missing, and its chat template whenever it is not the
// current one (the demo folder is ours). False (logged) when the model cannot be made.
bool ensure_demo_model(const std::filesystem::path& dir) {
  if (!std::filesystem::exists(dir / "config.json")) {
    std::fprintf(stderr, "[serve] creating the demo model in %s\n", dir.string().c_str());
    auto made = make_demo_model(dir.string(), demo_options{});
    if (!made) {
      std::fprintf(stderr, "coserve serve: cannot create the demo model: %s\n",
                   made.err().message.c_str());
      return false;
    }
  }
  if (read_text(dir / "chat_template.jinja") != k_demo_chat_template) {
    if (std::FILE* f = std::fopen((dir / "chat_template.jinja").string().c_str(), "wb")) {
      std::fputs(k_demo_chat_template, f);
      std::fclose(f);
    }
  }
  return true;
}

// --demo: the demo folder, with its defaults (vLLM's sampling defaults, the name "demo").
void use_demo_model(serve_args& a) {
  if (!a.generation_config_given) a.engine.generation_config = "vllm";
  a.engine.model_dir = cache_dir() / "demo-model";
  if (a.engine.served_model_name.empty()) a.engine.served_model_name = "demo";
}

http::api_options api_options_for(const serve_args& a) {
  http::api_options o{a.api_key, "0.1.0",
                      a.engine.served_model_name.empty() ? a.engine.model_dir.filename().string()
                                                         : a.engine.served_model_name};
  o.sse_keepalive = std::chrono::seconds(a.sse_keepalive_s);
  o.enable_auto_tool_choice = a.enable_auto_tool_choice;
  o.trust_request_chat_template = a.trust_request_chat_template;
  o.cors = a.cors;
  o.tool_call_parser = a.tool_call_parser;
  o.reasoning_parser = a.reasoning_parser;
  o.webui = a.webui;
  return o;
}

// Waits (on the event loop, without blocking it) until no HTTP response is being written, at most
// `limit`, then stops accepting and stops the loop.
asio::awaitable<void> finish_http(asio::io_context& io, http::http_server& server,
                                  std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  asio::steady_timer t(io);
  while (server.active_requests() > 0 && std::chrono::steady_clock::now() < deadline) {
    t.expires_after(std::chrono::milliseconds(5));
    co_await t.async_wait(asio::use_awaitable);
  }
  if (server.active_requests() > 0)
    std::fprintf(stderr, "[serve] %lld responses still open at exit\n",
                 static_cast<long long>(server.active_requests()));
  server.stop();
  io.stop();
}

// The HTTP side of the process: the listener, the event loop on its threads, and the signals. It
// opens before the model loads (/health answers 503 {"status":"loading"} meanwhile) and serves the
// engine once serve() hands it over.
//
// Signals: the first SIGINT/SIGTERM exits at once while the model loads; once it serves, it starts
// a drain on a thread of its own (engine::drain with --shutdown-timeout, then the open responses
// get 5 s to finish and the loop stops). A second signal exits at once with status 1.
class http_front {
 public:
  explicit http_front(const serve_args& a)
      : a_(a),
        api_(api_options_for(a)),
        server_(
            io_, a.limits,
            [this](http::http_request& r, http::response_writer& w) { return api_.handle(r, w); }),
        signals_(io_, SIGINT, SIGTERM) {}

  // Opens the listener (logged); the port, or 0 when it cannot (logged).
  uint16_t listen() {
    auto port = server_.listen(a_.host, static_cast<uint16_t>(a_.port));
    if (!port) {
      std::fprintf(stderr, "coserve serve: %s\n", port.err().message.c_str());
      return 0;
    }
    std::fprintf(
        stderr,
        "[serve] listening on http://%s:%u (loading the model: /health answers 503 until ready)\n",
        a_.host.c_str(), static_cast<unsigned>(*port));
    std::fflush(stderr);
    return *port;
  }

  // Waits for signals and runs the event loop on --http-threads threads.
  void start() {
    wait_for_signal();
    for (int i = 0; i < a_.http_threads; ++i) threads_.emplace_back([this] { io_.run(); });
  }

  // From now on requests reach `e`, and a signal drains it.
  void serve(engine& e) {
    api_.attach(e);
    loaded_.store(&e);
  }

  // Returns once the event loop has stopped (after a drain, or stop()).
  void join() {
    for (auto& t : threads_) t.join();
    if (drainer_.joinable()) drainer_.join();
  }
  void stop() { io_.stop(); }

  http::openai_api& api() { return api_; }
  const std::atomic<int>& signals_seen() const { return signals_seen_; }

 private:
  void wait_for_signal() {
    signals_.async_wait([this](const asio::error_code& ec, int sig) { on_signal(ec, sig); });
  }

  void on_signal(const asio::error_code& ec, int sig) {
    if (ec) return;
    if (signals_seen_.fetch_add(1) > 0) {
      std::fprintf(stderr, "[serve] signal %d again: exiting now\n", sig);
      std::fflush(stderr);
      std::_Exit(1);
    }
    wait_for_signal();  // the second one forces the exit
    engine* eng = loaded_.load();
    if (eng == nullptr) {
      std::fprintf(stderr, "[serve] signal %d while loading: exiting\n", sig);
      std::fflush(stderr);
      std::_Exit(0);
    }
    api_.set_draining();
    std::fprintf(
        stderr,
        "[serve] signal %d: draining (%lld responses in flight; at most %d s, then abort)\n", sig,
        static_cast<long long>(server_.active_requests()), a_.shutdown_timeout_s);
    drainer_ = std::thread([this, eng, timeout = a_.shutdown_timeout_s] {
      const int64_t aborted = eng->drain(std::chrono::seconds(timeout));
      if (aborted > 0)
        std::fprintf(stderr, "[serve] aborted %lld requests\n", static_cast<long long>(aborted));
      asio::co_spawn(io_, finish_http(io_, server_, std::chrono::seconds(5)), asio::detached);
    });
  }

  const serve_args& a_;
  asio::io_context io_;
  http::openai_api api_;
  http::http_server server_;
  std::atomic<engine*> loaded_{nullptr};
  std::atomic<int> signals_seen_{0};
  asio::signal_set signals_;
  std::thread drainer_;
  std::vector<std::thread> threads_;
};

// Rank 0 (or the only process): the HTTP front, then the engine; returns when a drain ends.
// `in_mpi_job`: a failed engine ends the process (and with it the job).
int serve(const serve_args& a, bool in_mpi_job) {
  http_front front(a);
  const uint16_t port = front.listen();
  if (port == 0) return 1;
  front.start();

  std::fprintf(stderr, "[serve] loading %s on %s\n", a.engine.model_dir.string().c_str(),
               a.engine.device.c_str());
  auto started = engine::start(a.engine);
  if (!started) {
    std::fprintf(stderr, "coserve serve: cannot start the engine: %s\n",
                 started.err().message.c_str());
    front.stop();
    front.join();
    return 1;
  }
  std::unique_ptr<engine> eng = std::move(started).value();
  std::optional<engine_failure_exit> failure_exit;
  if (in_mpi_job) failure_exit.emplace(*eng, front.signals_seen());
  front.serve(*eng);
  const auto& info = eng->info();
  std::fprintf(stderr, "[serve] ready: model '%s' (%s), max_model_len %d, vocab %d\n",
               info.served_model_name.c_str(), info.architecture.c_str(), info.max_model_len,
               info.vocab_size);
  if (a.webui)
    std::fprintf(
        stderr, "[serve] web UI: chat at http://%s:%u/ , live status at http://%s:%u/status\n",
        a.host.c_str(), static_cast<unsigned>(port), a.host.c_str(), static_cast<unsigned>(port));
  std::fflush(stderr);

  front.join();
  failure_exit.reset();
  front.api().detach_background();
  std::fprintf(stderr, "[serve] stopping the engine\n");
  eng->stop(true);
  std::fprintf(stderr, "[serve] bye\n");
  return 0;
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  serve_args a;
  switch (parse_serve_flags(argc, argv, a)) {
    case parse_outcome::help:
      std::fputs(serve_help_text().c_str(), stdout);
      return 0;
    case parse_outcome::markdown:
      std::fputs(serve_flags_markdown().c_str(), stdout);
      return 0;
    case parse_outcome::error:
      return 2;
    case parse_outcome::ok:
      break;
  }
  // An mpirun/srun launch: the MPI communicator first (the demo model below is made once per
  // host, while the other ranks of the host wait).
  const mpi_job job = join_mpi_job(a.engine.tensor_parallel_size, a.engine.device);
  if (job.exit_code != 0) return job.exit_code;
  const std::shared_ptr<communicator>& world = job.world;
  if (a.demo && writes_demo_model(world.get()) && !ensure_demo_model(cache_dir() / "demo-model"))
    return 1;
  if (a.demo) use_demo_model(a);
  if (world) {
    // Every host's demo model is written before any rank reads it.
    if (!mpi_startup_barrier(*world)) {
      std::fprintf(stderr, "coserve serve: rank %d: the startup barrier failed\n", world->rank());
      return 1;
    }
    if (world->rank() > 0)
      return serve_tp_rank(a.engine.model_dir, a.engine.cpu_threads, a.engine.device, *world);
    a.engine.tp_communicator = world;
  }
  return serve(a, world != nullptr);
}

}  // namespace coserve::cli
