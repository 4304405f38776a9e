# Runs the real `coserve` binary: tokenize and detokenize a few lines with the GPT-2 tokenizer
# (expected ids from Hugging Face tokenizers), and --help on both. Invoked by ctest with
# -DCOSERVE=<binary> -DSOURCE_DIR=<project root> -DWORK_DIR=<scratch folder>.
set(tok "${SOURCE_DIR}/../shared/testdata/tokenizers/gpt2")
if(NOT EXISTS "${tok}/tokenizer.json")
  message("skipped: ${tok} absent")
  return()
endif()

function(run_case args input expected)
  file(WRITE "${WORK_DIR}/cli_input.txt" "${input}")
  execute_process(COMMAND ${COSERVE} ${args} INPUT_FILE "${WORK_DIR}/cli_input.txt"
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "coserve ${args} exited ${rc}: ${err}")
  endif()
  if(NOT out STREQUAL expected)
    message(FATAL_ERROR "coserve ${args}\n  input:    ${input}\n  expected: ${expected}\n  got:      ${out}")
  endif()
endfunction()

run_case("tokenize;${tok}"
  "\"Hello world<|endoftext|>\"\n\"caf\\u00e9 \\ud83d\\ude00\\n\"\n\"  two  \\\"quoted\\\" \\\\\\\\ back\"\n"
  "[15496,995,50256]\n[66,1878,2634,30325,222,198]\n[220,734,220,366,421,5191,1,26867,736]\n")
run_case("detokenize;${tok}" "[198,1,50256]\n[15496,995]\n" "\"\\n\\\"<|endoftext|>\"\n\"Hello world\"\n")
run_case("detokenize;${tok};--skip-special-tokens" "[198,1,50256]\n" "\"\\n\\\"\"\n")

foreach(cmd tokenize detokenize)
  execute_process(COMMAND ${COSERVE} ${cmd} --help OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "usage: coserve ${cmd}")
    message(FATAL_ERROR "coserve ${cmd} --help: exit ${rc}, output '${out}'")
  endif()
endforeach()
