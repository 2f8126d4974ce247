# Configures tests/embedded (bulkbloom as a subproject, no build type given), builds its quick
# start and checks what it prints. Invoked by ctest with SOURCE_DIR (bulkbloom's root), EXPECTED,
# CXX_COMPILER, CXX_FLAGS and WORK_DIR. The CUDA backend is left out to keep the build short; its
# settings are still checked, unset.
file(REMOVE_RECURSE "${WORK_DIR}")
foreach(step
    "${CMAKE_COMMAND};-S;${SOURCE_DIR}/tests/embedded;-B;${WORK_DIR};-G;Ninja;-DBULKBLOOM_SOURCE_DIR=${SOURCE_DIR};-DBULKBLOOM_CUDA=OFF;-DCMAKE_CXX_COMPILER=${CXX_COMPILER};-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
    "${CMAKE_COMMAND};--build;${WORK_DIR};--target;quick_start")
  execute_process(COMMAND ${step} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "embedding step failed (${result}): ${step}")
  endif()
endforeach()
execute_process(COMMAND "${WORK_DIR}/quick_start" RESULT_VARIABLE result OUTPUT_VARIABLE output)
file(READ "${EXPECTED}" expected)
if(NOT result EQUAL 0 OR NOT output STREQUAL expected)
  message(FATAL_ERROR "quick start printed (exit ${result}):\n${output}\nexpected:\n${expected}")
endif()
