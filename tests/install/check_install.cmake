# The installed package, as a user meets it: `cmake --install` of this build into a fresh prefix
# (headers, libraries, bin/ppcompile, the package config), then
#  1. a project of its own (consumer/) configured with find_package(pprt) against that prefix, the
#     torch given by PPRT_PYTHON, built (one translation unit; ccache when the build uses it) and
#     run: --help, and a two-step pipelined run (plan from the installed ppcompile) of its model;
#  2. the same project configured with no torch given (and no virtual environment): it stops with
#     the package's message saying how to give one;
#  3. the guide's own program (docs/library.md, "Building against the installed package"): the
#     snippets marked ```cpp app.cpp and ```cmake CMakeLists.txt, as the guide writes them, put
#     in a temporary directory outside the source tree, configured as the guide says (the torch
#     through CMAKE_PREFIX_PATH, no build type: the snippet's Release), built, and trained on the
#     guide's plan from the installed ppcompile, pipelined and --reference, with the same losses.
# -D: BUILD_DIR, WORK_DIR, CONSUMER_DIR, CXX, LAUNCHER (may be empty), GENERATOR, PYTHON (an
# interpreter with the build's torch), GUIDE (docs/library.md), SOURCE_DIR.
cmake_minimum_required(VERSION 3.25)  # this script's policies
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR}/prefix ${WORK_DIR}/build ${WORK_DIR}/build-no-torch)
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
set(prefix ${WORK_DIR}/prefix)
foreach(f include/pprt/pprt.h include/pprt/main.h include/pprt/setup.h lib/libpprt.a lib/libppc.a
          lib/cmake/pprt/pprtConfig.cmake lib/cmake/pprt/pprtTargets.cmake bin/ppcompile)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the install has no ${f}")
  endif()
endforeach()
# Nothing of this build's machine in the package config: no path into the checkout or its torch.
file(READ ${prefix}/lib/cmake/pprt/pprtConfig.cmake config)
string(FIND "${config}" "${SOURCE_DIR}" at)
if(NOT at EQUAL -1)
  message(FATAL_ERROR "the installed pprtConfig.cmake names the source tree ${SOURCE_DIR}")
endif()
set(ppcompile ${prefix}/bin/ppcompile)
set(launcher)
if(LAUNCHER)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()

# 1. The consumer, its torch from PPRT_PYTHON.
run("configuring the consumer" ${CMAKE_COMMAND} -E env --unset=VIRTUAL_ENV
    ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX} ${launcher}
    -DCMAKE_PREFIX_PATH=${prefix} -DPPRT_PYTHON=${PYTHON})
run("building the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
set(exe ${WORK_DIR}/build/consumer)
run("consumer --help" ${exe} --help)
if(NOT out MATCHES "consumer: trains model 'bigram'" OR NOT out MATCHES "--plan"
   OR out MATCHES "--hidden")
  message(FATAL_ERROR "consumer --help is not the library's:\n${out}")
endif()
run("ppcompile" ${ppcompile} --layout "E|L" --pp 2 --schedule 1F1B --microbatches 2 --emit json
    -o ${WORK_DIR}/plan.json)
run("consumer --plan" ${exe} --plan ${WORK_DIR}/plan.json --steps 2 --global-batch 4 --vocab 32
    --seq-len 8 --progress lines --log-every 1 --threads 1)
if(NOT out MATCHES "step 2/2")
  message(FATAL_ERROR "the consumer's run did not train two steps:\n${out}")
endif()
message(STATUS "installed, built against and ran: ${exe}")

# 2. No torch given: the package says how to give one.
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=VIRTUAL_ENV --unset=CMAKE_PREFIX_PATH
                        ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build-no-torch
                        -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "pprt: no LibTorch found" OR NOT err MATCHES "-DPPRT_PYTHON=")
  message(FATAL_ERROR "configuring with no torch given did not stop with the package's message "
                      "(${rc}):\n${out}\n${err}")
endif()
message(STATUS "with no torch given, configuring stops with: pprt: no LibTorch found ...")

# 3. The guide's program, from its snippets.
file(READ ${GUIDE} guide)
function(snippets marker out_var)  # every block opened by the line `marker`, in order, joined
  set(text "${guide}")
  set(code "")
  string(LENGTH "${marker}\n" skip)
  while(TRUE)
    string(FIND "${text}" "${marker}\n" at)
    if(at EQUAL -1)
      break()
    endif()
    math(EXPR at "${at} + ${skip}")
    string(SUBSTRING "${text}" ${at} -1 text)
    string(FIND "${text}" "```" end)
    string(SUBSTRING "${text}" 0 ${end} block)
    string(APPEND code "${block}\n")
    string(SUBSTRING "${text}" ${end} -1 text)
  endwhile()
  if(code STREQUAL "")
    message(FATAL_ERROR "${GUIDE} has no block ${marker}")
  endif()
  set(${out_var} "${code}" PARENT_SCOPE)
endfunction()
snippets("```cpp app.cpp" app_cpp)
snippets("```cmake CMakeLists.txt" app_cmake)
if(DEFINED ENV{TMPDIR})
  set(tmp "$ENV{TMPDIR}")
else()
  set(tmp /tmp)
endif()
string(RANDOM LENGTH 10 ALPHABET abcdefghijklmnopqrstuvwxyz0123456789 tag)
set(app ${tmp}/pprt-guide-${tag})
cmake_path(IS_PREFIX SOURCE_DIR "${app}" NORMALIZE inside)
if(inside)
  message(FATAL_ERROR "the temporary directory ${app} is inside the source tree ${SOURCE_DIR}")
endif()
file(WRITE ${app}/app.cpp "${app_cpp}")
file(WRITE ${app}/CMakeLists.txt "${app_cmake}")
# From here on, a failure removes the directory before it stops the test. (Arguments go through
# ARGN, a list: none may hold a semicolon.)
function(check what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    file(REMOVE_RECURSE ${app})
    message(FATAL_ERROR "the guide's program: ${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()
check("finding torch" ${PYTHON} -c "import torch.utils\nprint(torch.utils.cmake_prefix_path, end='')")
set(torch_prefix "${out}")
# (not through check(): its ARGN would split the list at its semicolon)
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=VIRTUAL_ENV --unset=CMAKE_PREFIX_PATH
                        ${CMAKE_COMMAND} -S ${app} -B ${app}/build -G ${GENERATOR}
                        -DCMAKE_CXX_COMPILER=${CXX} ${launcher}
                        "-DCMAKE_PREFIX_PATH=${prefix};${torch_prefix}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  file(REMOVE_RECURSE ${app})
  message(FATAL_ERROR "the guide's program: configuring failed (${rc}):\n${out}\n${err}")
endif()
file(STRINGS ${app}/build/CMakeCache.txt build_type REGEX "^CMAKE_BUILD_TYPE:")
if(NOT build_type MATCHES "=Release$")
  file(REMOVE_RECURSE ${app})
  message(FATAL_ERROR "the guide's CMakeLists.txt left the build type at '${build_type}'")
endif()
check("building" ${CMAKE_COMMAND} --build ${app}/build)
# The guide's plan, with the installed ppcompile; two steps of the guide's run and its reference.
string(REGEX MATCH "pprt/bin/ppcompile (--layout [^\n]*-o plan.json)" line "${guide}")
if(NOT line)
  file(REMOVE_RECURSE ${app})
  message(FATAL_ERROR "${GUIDE} has no `$HOME/pprt/bin/ppcompile --layout ... -o plan.json` line")
endif()
separate_arguments(args UNIX_COMMAND "${CMAKE_MATCH_1}")
check("ppcompile ${CMAKE_MATCH_1}" ${CMAKE_COMMAND} -E chdir ${app} ${ppcompile} ${args})
set(losses)
foreach(how pipelined reference)
  set(flag)
  if(how STREQUAL reference)
    set(flag --reference)
  endif()
  check("app --plan plan.json ${flag}" ${app}/build/app --plan ${app}/plan.json --steps 3
        --global-batch 8 --vocab 64 --seq-len 16 --threads 1 --progress none
        --metrics ${app}/${how}.jsonl ${flag})
  file(STRINGS ${app}/${how}.jsonl lines)
  list(LENGTH lines n)
  if(NOT n EQUAL 3)
    file(REMOVE_RECURSE ${app})
    message(FATAL_ERROR "the guide's program (${how}) wrote ${n} metrics lines, not 3")
  endif()
  set(${how})
  foreach(l IN LISTS lines)
    string(JSON loss GET "${l}" loss)
    list(APPEND ${how} ${loss})
  endforeach()
endforeach()
foreach(i RANGE 2)
  list(GET pipelined ${i} a)
  list(GET reference ${i} b)
  # |a - b| <= 1e-5 |b|, in CMake's arithmetic (integers): compare through Python.
  check("comparing the losses (pipelined ${a}, reference ${b})" ${PYTHON} -c
        "import sys\nsys.exit(abs(${a} - ${b}) > 1e-5 * abs(${b}))")
endforeach()
file(REMOVE_RECURSE ${app})
message(STATUS "the guide's program built in ${app} against the installed package, trained "
               "pipelined and --reference with the same losses: ${pipelined}")
