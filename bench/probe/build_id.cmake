# Writes OUT, a header defining BULKBLOOM_GIT_COMMIT: the commit of the checkout at SOURCE_DIR,
# with "-dirty" when tracked files have changes ("unknown" outside a checkout). Run at every
# build; the file is rewritten only when its text changes, so a new commit recompiles one file.
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse HEAD
  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed)
  set(commit "unknown")
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
    OUTPUT_VARIABLE changes ERROR_QUIET)
  if(changes)
    string(APPEND commit "-dirty")
  endif()
endif()
set(text "#define BULKBLOOM_GIT_COMMIT \"${commit}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE "${OUT}" "${text}")
endif()
