# Installs the built bulkbloom into a scratch prefix, builds the consumer project against it and
# checks that the quick start prints what the README says. Invoked by ctest with BUILD_DIR,
# SOURCE_DIR, EXPECTED, CXX_FLAGS (those of the build, e.g. sanitizers) and WORK_DIR.
file(REMOVE_RECURSE "${WORK_DIR}")
foreach(step
    "${CMAKE_COMMAND};--install;${BUILD_DIR};--prefix;${WORK_DIR}/prefix"
    "${CMAKE_COMMAND};-S;${SOURCE_DIR};-B;${WORK_DIR}/build;-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix;-DCMAKE_BUILD_TYPE=Release;-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
    "${CMAKE_COMMAND};--build;${WORK_DIR}/build")
  execute_process(COMMAND ${step} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "consumer step failed (${result}): ${step}")
  endif()
endforeach()
execute_process(COMMAND "${WORK_DIR}/build/quick_start" RESULT_VARIABLE result
                OUTPUT_VARIABLE output)
file(READ "${EXPECTED}" expected)
if(NOT result EQUAL 0 OR NOT output STREQUAL expected)
  message(FATAL_ERROR "quick start printed (exit ${result}):\n${output}\nexpected:\n${expected}")
endif()
