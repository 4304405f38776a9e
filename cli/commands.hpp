// Subcommands of the `coserve` binary. Each returns the process exit status; argv[0] is the
// subcommand's own name. Defined one per cmd_*.cpp file.
#pragma once

namespace coserve::cli {

// --cpu-isa NAME for `serve` and `generate`: "auto" keeps the instruction set the CPU kernels
// picked at startup (the best this CPU runs); another name forces that one (as cpu_isa_available
// lists them: AVX3+BF16, AVX3_SPR, AVX3_ZEN4, AVX3_DL, AVX3, AVX2, SSE4, ...), for comparisons.
// Prints an error naming the ones this CPU runs and returns false for a name it cannot run.
bool apply_cpu_isa(const char* prog, const char* name);

int cmd_bench(int argc, char** argv);            // bench runtime|pipeline|serve|tokenizer ...
int cmd_make_demo_model(int argc, char** argv);  // make-demo-model DIR [...]
int cmd_architectures(int argc, char** argv);    // architectures [--markdown]
int cmd_generate(int argc, char** argv);         // generate MODEL_DIR ...
int cmd_tokenize(int argc, char** argv);         // tokenize TOKENIZER [--add-special-tokens]
int cmd_detokenize(int argc, char** argv);       // detokenize TOKENIZER [--skip-special-tokens]
int cmd_chat_template(int argc, char** argv);    // chat-template SOURCE --input FILE
int cmd_serve(int argc, char** argv);            // serve [MODEL_DIR | --demo] ...
int cmd_gguf(int argc, char** argv);  // gguf FILE [--json] [--tensor NAME [--dequantize OUT]]

}  // namespace coserve::cli
