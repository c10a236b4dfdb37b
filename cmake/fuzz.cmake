# PP_BUILD_FUZZ: whether the normal build also makes the fuzz build (fuzz/CMakeLists.txt). On by
# default when a clang++ that links -fsanitize=fuzzer is installed; PP_FUZZ_CXX names it.
find_program(PP_FUZZ_CXX NAMES clang++-14 clang++ DOC "clang++ for the fuzz build")
if(PP_FUZZ_CXX AND NOT DEFINED PP_FUZZ_CXX_WORKS)
  set(probe_dir ${CMAKE_BINARY_DIR}/CMakeFiles/fuzz-probe)
  file(WRITE ${probe_dir}/probe.cpp
       "#include <cstddef>\n#include <cstdint>\nextern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
  execute_process(
    COMMAND ${PP_FUZZ_CXX} -fsanitize=fuzzer,address,undefined ${probe_dir}/probe.cpp -o ${probe_dir}/probe
    RESULT_VARIABLE probe_result OUTPUT_QUIET ERROR_QUIET)
  if(probe_result EQUAL 0)
    set(PP_FUZZ_CXX_WORKS ON CACHE INTERNAL "")
  else()
    set(PP_FUZZ_CXX_WORKS OFF CACHE INTERNAL "")
  endif()
endif()
option(PP_BUILD_FUZZ "Also make the fuzz build (clang) in <build>/fuzz/clang and smoke-test it with ctest"
       ${PP_FUZZ_CXX_WORKS})
if(PP_BUILD_FUZZ AND NOT PP_FUZZ_CXX_WORKS)
  message(FATAL_ERROR "PP_BUILD_FUZZ needs clang++ with libFuzzer (Debian: clang-14, libclang-rt-14-dev)")
endif()
set(PP_FUZZ_SMOKE_SECONDS 5 CACHE STRING "Seconds per target of the ctest fuzz smoke")
