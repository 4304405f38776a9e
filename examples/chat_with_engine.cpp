// Embeds the serving engine without HTTP: starts the actor graph on a model folder, sends one chat
// request, prints the streamed text, and writes the actors' Chrome trace.
//
//   build/examples/chat_with_engine MODEL_DIR "Name three rivers." [trace.json]
//
// (`coserve make-demo-model DIR` makes a small random model to try it with; `coserve serve --demo`
// gives its folder a chat template.)
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <cstdio>
#include <string>

#include "actors/engine.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: chat_with_engine MODEL_DIR MESSAGE [TRACE_FILE]\n");
    return 2;
  }
  coserve::engine_config cfg;
  cfg.model_dir = argv[1];
  if (argc > 3) cfg.trace_file = argv[3];
  auto eng = coserve::engine::start(cfg);
  if (!eng) {
    std::fprintf(stderr, "%s\n", eng.err().message.c_str());
    return 1;
  }
  coserve::json::value messages;  // null becomes an array on the first push_back
  coserve::json::value user;
  user["role"] = "user";
  user["content"] = std::string(argv[2]);
  messages.push_back(std::move(user));

  int status = 0;
  asio::io_context io;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        coserve::generate_request req;
        req.input = coserve::chat_input{std::move(messages), {}, true, {}};
        req.params.max_tokens = 64;
        auto stream = co_await (*eng)->submit(std::move(req));
        if (!stream) {  // queue_full, invalid_request (e.g. no chat template), engine_down
          std::fprintf(stderr, "%s: %s\n", stream.err().code.c_str(), stream.err().message.c_str());
          status = 1;
          co_return;
        }
        while (auto ev = co_await (*stream)->next()) {  // resumes on this io_context
          std::fputs(ev->text.c_str(), stdout);
          if (ev->finish != coserve::finish_reason::none)
            std::printf("\n[finish: %s, %d prompt + %d completion tokens]\n",
                        coserve::to_string(ev->finish), ev->prompt_tokens, ev->completion_tokens);
        }
      },
      asio::detached);
  io.run();
  (*eng)->stop();  // drains open requests, stops the actors, writes the trace
  return status;
}
