# Runs the real `coserve chat-template` binary on a golden case (byte-for-byte output), a template
# raising an exception (exit 3, message on stderr) and --help. Invoked by ctest with
# -DCOSERVE=<binary> -DSOURCE_DIR=<project root> -DWORK_DIR=<scratch folder>.
set(data "${SOURCE_DIR}/../shared/testdata/chat-templates")
if(NOT EXISTS "${data}/goldens/index.json")
  message("skipped: ${data} absent")
  return()
endif()

file(WRITE "${WORK_DIR}/ct_input.json" [=[
{"messages": [{"role": "user", "content": "Hello"}], "add_generation_prompt": true,
 "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
]=])
execute_process(COMMAND ${COSERVE} chat-template "${data}/meta-llama-Llama-3.1-8B-Instruct.jinja"
                        --input "${WORK_DIR}/ct_input.json"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
file(READ "${data}/goldens/meta-llama-Llama-3.1-8B-Instruct__user_only.txt" expected)
if(NOT rc EQUAL 0 OR NOT out STREQUAL expected)
  message(FATAL_ERROR "chat-template render: exit ${rc} (${err})\nexpected:\n${expected}\ngot:\n${out}")
endif()

file(WRITE "${WORK_DIR}/ct_system.json" [=[
{"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}],
 "add_generation_prompt": true, "bos_token": "<bos>", "eos_token": "<eos>"}
]=])
execute_process(COMMAND ${COSERVE} chat-template "${data}/google-gemma-2-2b-it.jinja"
                        --input "${WORK_DIR}/ct_system.json"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 3 OR NOT err MATCHES "System role not supported" OR NOT out STREQUAL "")
  message(FATAL_ERROR "chat-template error case: exit ${rc}, stderr '${err}', stdout '${out}'")
endif()

execute_process(COMMAND ${COSERVE} chat-template --help OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT out MATCHES "usage: coserve chat-template")
  message(FATAL_ERROR "chat-template --help: exit ${rc}, output '${out}'")
endif()
