include_guard(GLOBAL)

# ninfer_fatal(<text>...): message(FATAL_ERROR) with the arguments concatenated
# (semicolons kept) and printed on ONE line. The leading space makes CMake treat
# the text as preformatted, so it does not re-wrap it at 80 columns and callers
# (the pipeline, tests) can match the whole message.
function(ninfer_fatal)
  set(text "")
  if(ARGC GREATER 0)
    math(EXPR last "${ARGC} - 1")
    foreach(i RANGE ${last})
      string(APPEND text "${ARGV${i}}")
    endforeach()
  endif()
  string(REPLACE "\n" " " text "${text}")
  message(FATAL_ERROR " ${text}")
endfunction()
