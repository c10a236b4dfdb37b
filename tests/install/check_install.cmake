# The installed package, as a user meets it: `cmake --install` of this build into a fresh prefix,
# then a project of its own (consumer/) configured with find_package(pprt) against that prefix
# alone, built (one translation unit; ccache when the build uses it) and run: --help, and a
# two-step pipelined run (plan from ppcompile) of its model.
# -D: BUILD_DIR, WORK_DIR, CONSUMER_DIR, CXX, LAUNCHER (may be empty), GENERATOR, PPCOMPILE.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR}/prefix ${WORK_DIR}/build)
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
foreach(f include/pprt/pprt.h include/pprt/main.h include/pprt/setup.h lib/libpprt.a lib/libppc.a
          lib/cmake/pprt/pprtConfig.cmake lib/cmake/pprt/pprtTargets.cmake)
  if(NOT EXISTS ${WORK_DIR}/prefix/${f})
    message(FATAL_ERROR "the install has no ${f}")
  endif()
endforeach()
set(launcher)
if(LAUNCHER)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
run("configuring the consumer" ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build
    -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX} ${launcher}
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
run("building the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
set(exe ${WORK_DIR}/build/consumer)
run("consumer --help" ${exe} --help)
if(NOT out MATCHES "consumer: trains model 'bigram'" OR NOT out MATCHES "--plan"
   OR out MATCHES "--hidden")
  message(FATAL_ERROR "consumer --help is not the library's:\n${out}")
endif()
run("ppcompile" ${PPCOMPILE} --layout "E|L" --pp 2 --schedule 1F1B --microbatches 2 --emit json
    -o ${WORK_DIR}/plan.json)
run("consumer --plan" ${exe} --plan ${WORK_DIR}/plan.json --steps 2 --global-batch 4 --vocab 32
    --seq-len 8 --progress lines --log-every 1 --threads 1)
if(NOT out MATCHES "step 2/2")
  message(FATAL_ERROR "the consumer's run did not train two steps:\n${out}")
endif()
message(STATUS "installed, built against and ran: ${exe}")
