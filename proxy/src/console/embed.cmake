# Turns the console's files into C++ raw string literals (no npm, no build step beyond
# CMake). Run as: cmake -DOUT=<file.inc> -DDIR=<this folder> -P embed.cmake
# (the file list is kept in sync with SLUICE_CONSOLE_FILES in proxy/CMakeLists.txt).
# Each file F becomes `inline constexpr std::string_view console_<stem>_<ext> = R"...";`.
set(delim "sluice_console")
set(text "// Generated from proxy/src/console/ by embed.cmake; do not edit.\n")
foreach(name index.html app.css app.js)
  set(f "${DIR}/${name}")
  file(READ "${f}" content)
  string(FIND "${content}" ")${delim}\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${f} contains the raw string delimiter )${delim}\"")
  endif()
  string(MAKE_C_IDENTIFIER "console_${name}" id)
  string(APPEND text "inline constexpr std::string_view ${id} = R\"${delim}(${content})${delim}\";\n")
endforeach()
file(WRITE "${OUT}" "${text}")
