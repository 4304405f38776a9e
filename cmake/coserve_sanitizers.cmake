# COSERVE_SANITIZE=address -> ASan + UBSan; COSERVE_SANITIZE=thread -> TSan. Applies to every target.
if(COSERVE_SANITIZE STREQUAL "address")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>)
  add_link_options(-fsanitize=address,undefined)
elseif(COSERVE_SANITIZE STREQUAL "thread")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=thread> $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      # Asio's recycling allocator uses fences TSan cannot model; they are Asio's own.
                      $<$<COMPILE_LANGUAGE:CXX>:-Wno-tsan>)
  add_link_options(-fsanitize=thread)
elseif(NOT COSERVE_SANITIZE STREQUAL "")
  message(FATAL_ERROR "COSERVE_SANITIZE must be '', 'address' or 'thread' (got '${COSERVE_SANITIZE}')")
endif()
if(NOT COSERVE_SANITIZE STREQUAL "" OR COSERVE_FUZZ)
  # Sanitizer and fuzz builds (coserve_fuzz.cmake). Line tables only (-g1): enough for the reports'
  # stack traces, and a sanitizer build compiles in about two thirds of -g's time. -O1 as the
  # sanitizers' and libFuzzer's documentation advise: instrumented code at -O3 took twice as long
  # to compile (test_pipeline.cpp under ASan: 86 s at -O3, 40 s at -O1) while the tests, which run
  # a small model, and the short fuzz runs need no more.
  string(REGEX REPLACE "(^| )-g( |$)" "\\1-g1\\2" CMAKE_CXX_FLAGS_RELWITHDEBINFO
                       "${CMAKE_CXX_FLAGS_RELWITHDEBINFO}")
  string(REGEX REPLACE "(^| )-O[23]( |$)" "\\1-O1\\2" CMAKE_CXX_FLAGS_RELWITHDEBINFO
                       "${CMAKE_CXX_FLAGS_RELWITHDEBINFO}")
  message(STATUS "coserve: sanitizer or fuzz build, RelWithDebInfo flags: ${CMAKE_CXX_FLAGS_RELWITHDEBINFO}")
endif()
