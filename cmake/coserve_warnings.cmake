# Warning flags shared by every coserve target (third-party headers are included as SYSTEM).
add_library(coserve_warnings INTERFACE)
target_compile_options(coserve_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wshadow=local>  # clang has no =local
  $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor -Wno-missing-field-initializers>
  # GCC 12 reports false positives through std::variant / std::optional moves.
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-maybe-uninitialized>)
if(COSERVE_WERROR)
  target_compile_options(coserve_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
