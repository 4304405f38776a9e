# Warning flags shared by every coserve target (third-party headers are included as SYSTEM).
add_library(coserve_warnings INTERFACE)
target_compile_options(coserve_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor
                            -Wno-missing-field-initializers>)
if(COSERVE_WERROR)
  target_compile_options(coserve_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
