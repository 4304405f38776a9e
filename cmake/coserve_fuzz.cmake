# COSERVE_FUZZ=ON: libFuzzer targets (tests/fuzz/). Clang only. Every project target is compiled
# with libFuzzer's coverage instrumentation (-fsanitize=fuzzer-no-link) and ASan + UBSan, so the
# fuzzer sees coverage inside the libraries; the fuzz executables link the libFuzzer main with
# -fsanitize=fuzzer. With COSERVE_SANITIZE=address (scripts/test-asan) the same build also holds the
# memory tests: ASan + UBSan come from coserve_sanitizers.cmake, and the tests link the sanitizer
# runtime's default coverage callbacks.
if(COSERVE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "COSERVE_FUZZ=ON needs clang (configure with CXX=clang++ CC=clang)")
  endif()
  if(COSERVE_SANITIZE STREQUAL "")
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined>
                        $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                        $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>)
    add_link_options(-fsanitize=address,undefined)
  elseif(NOT COSERVE_SANITIZE STREQUAL "address")
    message(FATAL_ERROR "COSERVE_FUZZ=ON goes with COSERVE_SANITIZE '' or 'address' (got '${COSERVE_SANITIZE}')")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>
                      # clang 14 fails to assemble coroutines under coverage + -fsanitize=function
                      # ("Cannot represent a difference across sections").
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize=function>)
  add_link_options(-fno-sanitize=function)
  message(STATUS "coserve: libFuzzer targets (ASan + UBSan)")
endif()
